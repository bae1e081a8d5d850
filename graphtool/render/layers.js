// The layered viewer's page: draws the open layers (layers_layout.js lays them out), opens and
// folds them on click, the details panel and search over every op and value. The view (pan,
// zoom, overview strip) is render/viewport.js, shared with the small page.
// Model text is only ever written with textContent; the page's CSP allows this script alone.
  // ------------------------------------------------------------------ drawing
  var svg = document.createElementNS(SVGNS, "svg");
  var scene = document.createElementNS(SVGNS, "g");
  svg.appendChild(scene);
  view.appendChild(svg);
  var placed = {};  // item -> absolute box, for what is drawn now
  function mk(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var a in attrs) { e.setAttribute(a, attrs[a]); }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function textLines(parent, lines, x, y, color) {
    var ty = y + 4;
    lines.forEach(function (ln) {
      var bold = ln[1] === FONT_B;
      ty += bold ? 13 : 12;
      var t = mk("text", {x: x, y: ty, "font-size": bold ? 12 : 10, "font-weight": bold ? "bold" : "normal",
                          fill: color || (bold ? "#fff" : "#eee")}, parent);
      t.textContent = ln[0];
      ty += bold ? 2 : 1;
    });
  }
  function drawLayer(g, ox, oy, parent) {
    var lay = layout(g);
    if (g !== 0) {
      var frame = mk("g", {"class": "layer open", id: "l" + g, "data-layer": g}, parent);
      mk("rect", {x: ox, y: oy, width: lay.w, height: lay.h, rx: 6}, frame);
      var head = mk("g", {"class": "head", "data-layer": g}, frame);
      mk("rect", {x: ox, y: oy, width: lay.w, height: HEAD, rx: 6}, head);
      var t = mk("text", {x: ox + 8, y: oy + 15, "font-size": 12, "font-weight": "bold"}, head);
      t.textContent = headText(g);
      mk("title", {}, head).textContent = (L.full[g] || L.label[g]) + " (click to fold)";
      placed["l" + g] = {x: ox, y: oy, w: lay.w, h: lay.h};
    }
    var eg = mk("g", {"class": "edges"}, parent);
    lay.edges.forEach(function (e) {
      var d = "";
      e.points.forEach(function (p, i) {
        var x = p[0] + ox, y = p[1] + oy;
        if (i === 0) { d += "M" + x + "," + y; return; }
        var q = e.points[i - 1], my = (q[1] + p[1]) / 2 + oy;
        d += "C" + (q[0] + ox) + "," + my + " " + x + "," + my + " " + x + "," + y;
      });
      var path = mk("path", {d: d, "class": "edge", "marker-end": "url(#arrow)"}, eg);
      mk("title", {}, path).textContent = valueName(e.v) + "  " + fullType(e.v);
    });
    Object.keys(lay.pos).forEach(function (item) {
      var b = lay.pos[item], x = ox + b.x, y = oy + b.y, id = +item.slice(1);
      if (item[0] === "l" && expanded[id]) { drawLayer(id, x, y, parent); return; }
      placed[item] = {x: x, y: y, w: b.w, h: b.h};
      var s = boxSize(item), gEl, color;
      if (item[0] === "l") {
        gEl = mk("g", {"class": "layer shut", id: item, "data-layer": id}, parent);
        mk("rect", {x: x, y: y, width: b.w, height: b.h, rx: 5}, gEl);
        mk("rect", {x: x + 3, y: y + 3, width: b.w - 6, height: b.h - 6, rx: 4, "class": "inner"}, gEl);
        textLines(gEl, s.lines, x + 8, y, "#1d3557");
        mk("title", {}, gEl).textContent = (L.full[id] || L.label[id]) + "\n" + opCount[id] + " ops (click to open)";
      } else {
        color = D.colors[cat(id)] || "#666";
        var io = isIo(id);
        gEl = mk("g", {"class": "node" + (io ? " io" : ""), id: item, "data-node": id}, parent);
        mk("rect", {x: x, y: y, width: b.w, height: b.h, rx: io ? b.h / 2 : 4, fill: color}, gEl);
        textLines(gEl, s.lines, x + 8, y);
        var nm = nodeName(id), tip = [opName(id) + (nm ? "  " + nm : "")];
        for (var j = D.outsOff[id]; j < D.outsOff[id + 1]; j++) { tip.push("→ " + valueName(D.outs[j]) + "  " + fullType(D.outs[j])); }
        if (io) { var iv = opName(id) === "input" ? D.outs[D.outsOff[id]] : D.ins[D.insOff[id]]; tip.push(fullType(iv)); }
        mk("title", {}, gEl).textContent = tip.join("\n");
      }
    });
  }
  var defs = mk("defs", {}, svg);
  var marker = mk("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6,
                             orient: "auto-start-reverse"}, defs);
  mk("path", {d: "M0,0 L10,5 L0,10 z", fill: "#777"}, marker);
  var world = {w: 1, h: 1};
  function redraw() {
    while (scene.firstChild) { scene.removeChild(scene.firstChild); }
    placed = {};
    var lay = layout(0);
    world = {w: lay.w, h: lay.h};
    drawLayer(0, 0, 0, scene);
    if (lit !== null) { var e = document.getElementById("n" + lit); if (e) { e.classList.add("lit"); } }
    marks.forEach(function (k) { var e = document.getElementById("n" + k); if (e) { e.classList.add("match"); } });
    apply();
    drawOverview();
  }

  // ------------------------------------------------------------------ view: render/viewport.js
  var port = graphtoolViewport({
    svg: svg,
    world: function () { return {x: 0, y: 0, w: world.w, h: world.h}; },
    show: function (v) { scene.setAttribute("transform", "scale(" + v.s + ") translate(" + (-v.x) + "," + (-v.y) + ")"); },
    paint: function (c, rect) {
      Object.keys(placed).forEach(function (item) {
        var b = placed[item], id = +item.slice(1);
        if (item[0] === "l") {
          rect(b, "#8aa", 1, true);
          if (!expanded[id]) { rect(b, "#dfe7f1", 1.5); }
        } else {
          rect(b, marks.indexOf(id) >= 0 ? "#e8590c" : (D.colors[cat(id)] || "#666"), 1.5);
        }
      });
    }
  });
  var vt = port.vt, size = port.size, apply = port.apply, setView = port.setView, fitScale = port.fitScale;
  var zoomBy = port.zoomBy, drawOverview = port.drawOverview;
  function fit() { port.fit(1.5); }

  // ------------------------------------------------------------------ expanding and revealing
  function toggle(l) {
    expanded[l] = expanded[l] ? 0 : 1;
    invalidate(L.parent[l]);
    var before = placed["l" + l];
    redraw();
    var after = placed["l" + l];
    if (before && after) {  // keep the layer's top-left corner where it was on screen
      vt.x += after.x - before.x; vt.y += after.y - before.y;
      apply();
    }
  }
  function reveal(k) {  // open every layer around op k, then show it
    var changed = false;
    for (var l = nodeLayer[k]; l > 0; l = L.parent[l]) {
      if (!expanded[l]) { expanded[l] = 1; invalidate(L.parent[l]); changed = true; }
    }
    if (changed || !placed["n" + k]) { redraw(); }
    var b = placed["n" + k];
    if (!b) { return; }
    setView(Math.max(vt.s, READABLE / 10), b.x + b.w / 2, b.y + b.h / 2);
    setLit(k);
    show(k);
  }
  var lit = null;
  function setLit(k) {
    var old = lit !== null && document.getElementById("n" + lit);
    if (old) { old.classList.remove("lit"); }
    lit = k;
    var e = k !== null && document.getElementById("n" + k);
    if (e) { e.classList.add("lit"); }
  }
  // the first screen: open layers breadth first while the picture stays small enough to read
  function opening() {
    var budget = 160, count = layerItems(0).length, queue = kids[0].slice();
    while (queue.length) {
      var l = queue.shift(), more = layerItems(l).length - 1;
      if (count + more > budget) { continue; }
      expanded[l] = 1; count += more;
      kids[l].forEach(function (c) { queue.push(c); });
    }
    redraw();
    var first = D.graphIo.length ? D.graphIo[0].op : 0, b = placed["n" + first];
    var z = size(), s = Math.min(1.2, READABLE / 10);
    if (fitScale() >= READABLE / 12) { fit(); return; }
    if (!b) { b = {x: 0, y: 0, w: 0, h: 0}; }
    // at the readable zoom, the first input near the top; the graph's left edge never cut off
    var half = z.w / 2 / s, cx = world.w / 2;
    if (world.w * s > z.w) { cx = b.x + b.w + 20 < 2 * half ? half - 10 : Math.min(world.w - half + 10, b.x + b.w / 2); }
    setView(s, cx, Math.max(-10, b.y - 60) + z.h / 2 / s);
  }

  // ------------------------------------------------------------------ the details panel
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }
  function section(title) { panel.appendChild(el("h2", title)); var t = el("table"); panel.appendChild(t); return t; }
  function row(t, a, b, onclick) {
    var tr = el("tr");
    tr.appendChild(el("td", a, "k"));
    var td = el("td");
    if (b instanceof Node) { td.appendChild(b); } else { td.textContent = b; }
    tr.appendChild(td);
    if (onclick) { tr.className = "go"; tr.addEventListener("click", onclick); }
    t.appendChild(tr);
  }
  function valueBox(v) {
    var box = el("div");
    box.appendChild(el("div", valueName(v)));
    var t = S[D.vType[v]];
    if (t || D.vConst[v]) { box.appendChild(el("div", (D.vConst[v] ? "constant " : "") + t, "stats")); }
    box.title = valueName(v) + "  " + fullType(v);
    return box;
  }
  function path(l) {
    var out = [];
    for (; l > 0; l = L.parent[l]) { if (L.kind[l] !== "run") { out.unshift(L.label[l]); } }
    return out.join(" / ");
  }
  function show(k) {
    clear(panel);
    var op = opName(k);
    panel.appendChild(el("h3", op === "input" || op === "output" ? "graph " + op : op));
    if (nodeName(k)) { panel.appendChild(el("div", nodeName(k), "name")); }
    var where = path(nodeLayer[k]);
    if (where) { panel.appendChild(el("div", "in " + where, "hint")); }
    var attrs = S[D.attrs[k]];
    if (attrs) {
      var ta = section("Attributes");
      attrs.split("\n").forEach(function (line) { var i = line.indexOf(" = "); row(ta, line.slice(0, i), line.slice(i + 3)); });
    }
    var j;
    if (D.insOff[k + 1] > D.insOff[k]) {
      var ti = section("Inputs");
      for (j = D.insOff[k]; j < D.insOff[k + 1]; j++) {
        var v = D.ins[j];
        if (v < 0) { row(ti, j - D.insOff[k], "(none)"); continue; }
        var p = D.vProd[v];
        row(ti, j - D.insOff[k], valueBox(v), p >= 0 && !D.vConst[v] ? (function (p) { return function () { reveal(p); }; })(p) : null);
      }
    }
    if (D.outsOff[k + 1] > D.outsOff[k]) {
      var to = section("Outputs");
      for (j = D.outsOff[k]; j < D.outsOff[k + 1]; j++) { row(to, j - D.outsOff[k], valueBox(D.outs[j])); }
    }
  }
  function overviewPanel() {
    clear(panel);
    panel.appendChild(el("p", D.opCount + " ops in " + (NL - 1) + " layers. Click a layer to open or fold it, an op for its details; / searches every op and value.", "hint"));
    var t = section("Model inputs and outputs");
    D.graphIo.forEach(function (io) {
      var k = io.op, v = io.kind === "input" ? D.outs[D.outsOff[k]] : D.ins[D.insOff[k]];
      row(t, io.kind, valueBox(v), function () { reveal(k); });
    });
    // inputs and outputs of If/Loop/Scan bodies, under their op
    var bodies = [];
    for (var l = 1; l < NL; l++) { if (L.kind[l] === "body") { bodies.push(l); } }
    if (bodies.length) {
      panel.appendChild(el("h2", "Subgraph inputs and outputs"));
      bodies.forEach(function (l) {
        var det = el("details"), sum = el("summary", L.full[l] || L.label[l]);
        det.appendChild(sum);
        var tb = el("table");
        for (var k = L.lo[l]; k < L.mid[l]; k++) {
          if (!isIo(k)) { continue; }
          var v = opName(k) === "input" ? D.outs[D.outsOff[k]] : D.ins[D.insOff[k]];
          var tr = el("tr", null, "go");
          tr.appendChild(el("td", opName(k), "k"));
          var td = el("td"); td.appendChild(valueBox(v)); tr.appendChild(td);
          tr.addEventListener("click", (function (k) { return function () { reveal(k); }; })(k));
          tb.appendChild(tr);
        }
        det.appendChild(tb);
        panel.appendChild(det);
      });
    }
    var counts = {};
    for (var k = 0; k < N; k++) { if (!isIo(k)) { var o = opName(k); counts[o] = (counts[o] || 0) + 1; } }
    var names = Object.keys(counts).sort(function (a, b) { return counts[b] - counts[a] || (a < b ? -1 : 1); });
    var tc = section("Op types (click to search)");
    tc.className = "list";
    names.forEach(function (o) {
      var tr = el("tr", null, "go");
      var sw = el("span", "", "swatch"); sw.style.background = D.colors[D.cats[D.ops.indexOf(o)]] || "#666";
      var td0 = el("td", null, "k"); td0.appendChild(sw); td0.appendChild(document.createTextNode(String(counts[o])));
      tr.appendChild(td0); tr.appendChild(el("td", o));
      tr.addEventListener("click", function () { search.value = o; runSearch(); goTo(0); });
      tc.appendChild(tr);
    });
  }
  svg.addEventListener("click", function (e) {
    if (port.moved()) { return; }
    var t = e.target.closest ? e.target : null;
    var nodeEl = t && t.closest("g.node"), layerEl = t && (t.closest("g.head") || t.closest("g.layer.shut"));
    if (nodeEl) { var k = +nodeEl.getAttribute("data-node"); setLit(k); show(k); return; }
    if (layerEl) { toggle(+layerEl.getAttribute("data-layer")); }
  });

  // ------------------------------------------------------------------ search over every op and value
  var lowerNames = null, lowerValues = null;
  function searchable() {
    if (lowerNames) { return; }
    lowerNames = new Array(N); lowerValues = new Array(D.vName.length);
    for (var k = 0; k < N; k++) { lowerNames[k] = nodeName(k).toLowerCase(); }
    for (var v = 0; v < D.vName.length; v++) { lowerValues[v] = valueName(v).toLowerCase(); }
  }
  var matches = [], cur = -1, marks = [];
  function consumerOf(v) { for (var j = 0; j < D.ins.length; j++) { if (D.ins[j] === v) { return opAt(j); } } return -1; }
  function opAt(j) {  // the op whose inputs hold position j (binary search over insOff)
    var lo = 0, hi = N - 1;
    while (lo < hi) { var m = (lo + hi + 1) >> 1; if (D.insOff[m] <= j) { lo = m; } else { hi = m - 1; } }
    return lo;
  }
  function runSearch() {
    var q = search.value.trim().toLowerCase();
    marks.forEach(function (k) { var e = document.getElementById("n" + k); if (e) { e.classList.remove("match"); } });
    matches = []; cur = -1; marks = [];
    if (q) {
      var exact = [], partial = [], seen = {}, opMatch = {};
      D.ops.forEach(function (o, i) { var s = o.toLowerCase(); opMatch[i] = s === q ? 2 : (s.indexOf(q) >= 0 ? 1 : 0); });
      searchable();
      for (var k = 0; k < N; k++) {
        var nm = lowerNames[k], om = opMatch[D.op[k]];
        if (nm === q || om === 2) { exact.push(k); seen[k] = 1; }
        else if (om === 1 || (nm && nm.indexOf(q) >= 0)) { partial.push(k); seen[k] = 1; }
      }
      // values: a value's name finds the op that makes it (or, for a constant or input, its first reader)
      for (var v = 0; v < D.vName.length; v++) {
        var vn = lowerValues[v];
        if (vn.indexOf(q) < 0) { continue; }
        var p = D.vProd[v];
        if (p < 0 || D.vConst[v]) { p = consumerOf(v); }
        if (p >= 0 && !seen[p]) { (vn === q ? exact : partial).push(p); seen[p] = 1; }
      }
      matches = exact.concat(partial);
    }
    hits.textContent = q ? (matches.length ? matches.length + " match" + (matches.length > 1 ? "es" : "") : "no match") : "";
    clear(results);
    matches.slice(0, 50).forEach(function (k, i) {
      var li = el("li");
      li.appendChild(el("span", opName(k), "op"));
      li.appendChild(document.createTextNode(nodeName(k) || ""));
      var where = path(nodeLayer[k]);
      if (where) { li.appendChild(el("span", where, "where")); }
      li.addEventListener("mousedown", function (e) { e.preventDefault(); goTo(i); });
      results.appendChild(li);
    });
    marks = matches.slice(0, 1000);
    marks.forEach(function (k) { var e = document.getElementById("n" + k); if (e) { e.classList.add("match"); } });
    drawOverview();
  }
  function goTo(i) {
    if (!matches.length) { return; }
    cur = (i + matches.length) % matches.length;
    reveal(matches[cur]);
    hits.textContent = (cur + 1) + " / " + matches.length;
    Array.prototype.forEach.call(results.children, function (li, j) { li.classList.toggle("cur", j === cur); });
  }
  graphtoolSearchKeys(search, results, runSearch, goTo, function () { return cur; }, 200);
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey || (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA"))) { return; }
    if (e.key === "/") { e.preventDefault(); search.focus(); search.select(); }
    else if (port.key(e)) { return; }
    else if (e.key === "Escape") { setLit(null); overviewPanel(); }
  });

  marks0.structure = performance.now();
  opening();
  marks0.drawn = performance.now();
  overviewPanel();
  marks0.panel = performance.now();
  document.body.setAttribute("data-phases", JSON.stringify(marks0));
  window.graphtool = {  // for tests and the bench
    view: function () { return {x: vt.x, y: vt.y, s: vt.s, scale: vt.s, w: size().w / vt.s, h: size().h / vt.s}; },
    reveal: reveal, toggle: toggle, placed: function () { return placed; }, layout: layout,
    find: function (name) { for (var k = 0; k < N; k++) { if (nodeName(k) === name) { return k; } } return -1; },
    name: nodeName,
    count: N, layers: NL};
  // ready: after the first frame with the picture was painted (a task queued from the frame's callback)
  requestAnimationFrame(function () { setTimeout(function () { document.body.setAttribute("data-ready", String(Math.round(performance.now()))); }, 0); });
