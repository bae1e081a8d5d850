(function () {
  "use strict";
  // graphtool's page script. Model text arrives only as JSON data and is only ever written with
  // textContent; the page's Content-Security-Policy allows this script alone (by its hash).
  var data = JSON.parse(document.getElementById("gt-data").textContent);
  var view = document.getElementById("view");
  var svg = view.querySelector("svg");
  var panel = document.getElementById("details");
  var search = document.getElementById("search");
  var hits = document.getElementById("hits");
  var results = document.getElementById("results");
  if (!svg) { document.body.setAttribute("data-ready", "1"); return; }
  var info = data.info || {};
  var stats = data.stats || {};
  // The opening zoom puts the smallest node text (data.minFont, in SVG units) at READABLE px.
  var READABLE = data.readable || 12;
  var readableScale = READABLE / (data.minFont || 9);
  var base = svg.viewBox.baseVal;
  var home = {x: base.x, y: base.y, w: base.width || 1, h: base.height || 1};
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  svg.setAttribute("preserveAspectRatio", "xMidYMid meet");

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }

  // ------------------------------------------------------------------ geometry and view
  var graph0 = svg.querySelector("g.graph");
  var m = graph0 && graph0.transform.baseVal.consolidate();
  m = m ? m.matrix : {a: 1, d: 1, e: 0, f: 0};
  var boxes = {}, order = [];
  svg.querySelectorAll("g.node").forEach(function (g) {
    var b = g.getBBox();
    var shape = g.querySelector("path, polygon, ellipse");
    var stroke = shape && shape.getAttribute("stroke");
    boxes[g.id] = {x: m.a * b.x + m.e, y: m.d * b.y + m.f, w: b.width * m.a, h: b.height * m.d,
                   color: stroke && stroke !== "transparent" ? stroke : "#999", g: g};
    order.push(g.id);
  });
  // the view (render/viewport.js): Graphviz's SVG shows it through its viewBox
  var marks = {};  // element id -> colour drawn over the overview
  var port = graphtoolViewport({
    svg: svg, onScreen: true,
    world: function () { return home; },
    minScale: function () { return fitScale() * 0.5; },
    show: function (vt, z) { svg.setAttribute("viewBox", vt.x + " " + vt.y + " " + z.w / vt.s + " " + z.h / vt.s); },
    fit: function () { fit(); },
    paint: function (c, rect) {
      // boxes in their border colour; a diff's changes (thick borders) drawn again, larger, on top
      order.forEach(function (id) { rect(boxes[id], boxes[id].color, 1.5); });
      order.forEach(function (id) { var b = boxes[id]; if (info[id] && info[id].change && info[id].change !== "context") { rect(b, b.color, 3); } });
      Object.keys(marks).forEach(function (id) { if (boxes[id]) { rect(boxes[id], marks[id], 5); } });
    }
  });
  var size = port.size, setView = port.setView, zoomBy = port.zoomBy, fitScale = port.fitScale;
  var drawOverview = port.drawOverview, apply = port.apply;
  function scale() { return port.vt.s; }
  function uncut(keep) {
    // no box cut in two by the view's left edge: move the edge left of any it crosses, as long
    // as ``keep`` (the box the view is for) stays wholly in view
    var vt = port.vt, w = size().w / vt.s;
    var start = vt.x, limit = keep ? keep.x + keep.w + 6 / scale() - w : -Infinity;
    for (var pass = 0; pass < 4; pass++) {
      var edge = vt.x, left = edge;
      order.forEach(function (id) { var b = boxes[id]; if (b.x < edge && b.x + b.w > edge) { left = Math.min(left, b.x - 6 / scale()); } });
      if (left === edge) { break; }
      if (left < limit) { vt.x = start; break; }
      vt.x = left;
    }
    apply();
  }
  // the whole graph, but a small one no larger than half again the readable zoom
  function fit() { port.fit(readableScale * 1.5); }
  function topmost() {
    var best = null;
    order.forEach(function (id) { if (!best || boxes[id].y < boxes[best].y) { best = id; } });
    return best;
  }
  function opening() {
    var z = size(), fs = fitScale();
    if (fs >= readableScale) { fit(); return; }
    var s = readableScale;
    var anchor = (data.start || []).filter(function (id) { return boxes[id]; })[0] || topmost();
    var b = anchor ? boxes[anchor] : {x: home.x, y: home.y, w: 0, h: 0};
    var w = z.w / s, h = z.h / s;
    var cx = home.w <= w ? home.x + home.w / 2 :
      Math.max(home.x + w / 2, Math.min(home.x + home.w - w / 2, b.x + b.w / 2));
    var top = Math.max(home.y, b.y - 28 / s);
    setView(s, cx, top + h / 2);
    uncut(b);
  }

  // ------------------------------------------------------------------ highlight and focus
  var lit = null;
  function setLit(id) {
    if (lit && boxes[lit]) { boxes[lit].g.classList.remove("lit"); }
    lit = boxes[id] ? id : null;
    if (lit) { boxes[lit].g.classList.add("lit"); }
  }
  function focusNode(id) {
    var b = boxes[id];
    if (!b) { return; }
    setView(Math.max(scale(), readableScale), b.x + b.w / 2, b.y + b.h / 2);
    setLit(id);
    show(id);
  }
  function showBox(ids) {
    // All of ``ids`` when they fit at a zoom where boxes still read; else the first of them at
    // the readable zoom (the overview and the panel's list show where the others are).
    var x1 = Infinity, y1 = Infinity, x2 = -Infinity, y2 = -Infinity;
    ids.forEach(function (id) {
      var b = boxes[id];
      x1 = Math.min(x1, b.x); y1 = Math.min(y1, b.y); x2 = Math.max(x2, b.x + b.w); y2 = Math.max(y2, b.y + b.h);
    });
    if (x1 === Infinity) { return; }
    var z = size(), pad = 40;
    var s = Math.min(readableScale, (z.w - 2 * pad) / (x2 - x1), (z.h - 2 * pad) / (y2 - y1));
    if (s >= readableScale * 0.6) { setView(s, (x1 + x2) / 2, (y1 + y2) / 2); uncut({x: x1, w: x2 - x1}); return; }
    var b = boxes[ids[0]];
    setView(readableScale, b.x + b.w / 2, b.y + b.h / 2);
    uncut(b);
  }

  // ------------------------------------------------------------------ the details panel
  function row(table, cells, cls) {
    var tr = el("tr", null, cls);
    cells.forEach(function (c, k) {
      var td = el("td", null, k === 0 ? "k" : null);
      if (c instanceof Node) { td.appendChild(c); } else { td.textContent = c === undefined || c === null ? "" : String(c); }
      tr.appendChild(td);
    });
    table.appendChild(tr);
  }
  function weightLine(w, typed) {
    var s = stats[w];
    if (!s) { return null; }
    var parts = typed ? [] : [s.dtype + " " + s.shape];
    if (s.min !== undefined) { parts.push("min " + s.min, "max " + s.max, "mean " + s.mean, "std " + s.std); }
    if (s.nan) { parts.push(s.nan + " NaN"); }
    if (s.stats) { parts.push(s.stats); }
    return parts.join(" · ");
  }
  function valueCell(r) {
    var box = el("div");
    box.appendChild(el("div", r.value || "(none)"));
    var sub = [];
    if (r.type) { sub.push(r.type); }
    if (r.values) { sub.push("= " + r.values); }
    if (sub.length) { var t = el("div", sub.join(" "), "stats"); if (r.full) { t.title = r.full; } box.appendChild(t); }
    var w = r.weight && !r.values ? weightLine(r.weight, !!r.type) : null;
    if (w) { box.appendChild(el("div", w, "stats")); }
    return box;
  }
  function section(title) { panel.appendChild(el("h2", title)); var t = el("table"); panel.appendChild(t); return t; }
  function nodeTables(n) {
    var keys = Object.keys(n.attributes || {});
    if (keys.length) {
      var t = section("Attributes");
      var defaults = n.defaults || [];
      keys.forEach(function (k) {
        var isDefault = defaults.indexOf(k) >= 0;
        row(t, [k, n.attributes[k] + (isDefault ? "  (default)" : "")], isDefault ? "default" : null);
      });
    }
    if ((n.inputs || []).length) {
      var ti = section("Inputs");
      n.inputs.forEach(function (r) { row(ti, [r.slot, valueCell(r)]); });
    }
    if ((n.outputs || []).length) {
      var to = section("Outputs");
      n.outputs.forEach(function (r) { row(to, [r.slot, valueCell(r)]); });
    }
  }
  function sideBySide(a, b) {
    var t = section("Before → after");
    var head = el("tr");
    ["", "before", "after"].forEach(function (h) { head.appendChild(el("th", h)); });
    t.appendChild(head);
    function pair(label, x, y) { row(t, [label, x, y], String(x) !== String(y) ? "differs" : null); }
    pair("op", a.op_type, b.op_type);
    pair("name", a.name, b.name);
    var attrs = Object.keys(a.attributes || {});
    Object.keys(b.attributes || {}).forEach(function (k) { if (attrs.indexOf(k) < 0) { attrs.push(k); } });
    attrs.forEach(function (k) { pair(k, (a.attributes || {})[k] || "—", (b.attributes || {})[k] || "—"); });
    function io(r) { return r ? (r.value || "(none)") + (r.type ? "  " + r.type : "") + (r.values ? " = " + r.values : "") : "—"; }
    var n = Math.max((a.inputs || []).length, (b.inputs || []).length);
    for (var k = 0; k < n; k++) {
      var x = (a.inputs || [])[k], y = (b.inputs || [])[k];
      pair("in " + ((y || x).slot), io(x), io(y));
    }
    n = Math.max((a.outputs || []).length, (b.outputs || []).length);
    for (k = 0; k < n; k++) {
      var p = (a.outputs || [])[k], q = (b.outputs || [])[k];
      pair("out " + ((q || p).slot), io(p), io(q));
    }
  }
  function showGroup(group, ids) {
    clear(panel);
    panel.appendChild(el("h3", group.title));
    panel.appendChild(el("div", ids.length + " node" + (ids.length === 1 ? "" : "s") + " lit; click one to go there", "hint"));
    var t = el("table", null, "list");
    ids.forEach(function (id) {
      var n = info[id] || {};
      var tr = el("tr");
      tr.setAttribute("data-node", id);
      tr.appendChild(el("td", n.change || "", "k " + (n.change || "")));
      tr.appendChild(el("td", n.op_type || ""));
      tr.appendChild(el("td", n.name || ((n.outputs || [])[0] || {}).value || ""));
      tr.addEventListener("click", function () { focusNode(id); });
      t.appendChild(tr);
    });
    panel.appendChild(t);
  }
  function show(id) {
    var n = info[id];
    if (!n) { return; }
    clear(panel);
    if (n.op_type === undefined) {  // a graph input or output
      var kind = n.input !== undefined ? "input" : "output";
      panel.appendChild(el("h3", "graph " + kind));
      var t = section("Value");
      row(t, ["name", n[kind]]);
      if (n.type) { row(t, ["type", n.type]); if (n.full) { t.lastChild.lastChild.title = n.full; } }
      return;
    }
    var h = el("h3", n.op_type);
    if (n.change) { h.appendChild(el("span", n.change, "badge " + n.change)); }
    panel.appendChild(h);
    if (n.name) { panel.appendChild(el("div", n.name, "name")); }
    if (n.scope && n.scope !== "main") { panel.appendChild(el("div", "in " + n.scope, "hint")); }
    if (n.details && n.details.length) {
      panel.appendChild(el("h2", "What changed"));
      var ul = el("ul");
      n.details.forEach(function (d) { ul.appendChild(el("li", d)); });
      panel.appendChild(ul);
    }
    if (n.before) { sideBySide(n.before, n); }
    nodeTables(n);
  }
  function overviewPanel() {
    // what the panel says before any click: the graph's inputs and outputs, and its op types
    // (click one to search for it)
    clear(panel);
    var ios = [], ops = {};
    order.forEach(function (id) {
      var n = info[id];
      if (!n) { return; }
      if (n.op_type === undefined) { ios.push(id); } else { ops[n.op_type] = (ops[n.op_type] || 0) + 1; }
    });
    panel.appendChild(el("p", "Click a node to see its attributes, inputs, outputs and weights.", "hint"));
    ios.sort(function (a, b) { return (info[a].input === undefined) - (info[b].input === undefined); });
    function ioRow(t, id) {
      var n = info[id], kind = n.input !== undefined ? "input" : "output";
      var tr = el("tr");
      tr.appendChild(el("td", kind, "k"));
      var td = el("td");
      td.appendChild(valueCell({value: n[kind], type: n.type, full: n.full}));
      tr.appendChild(td);
      tr.setAttribute("data-node", id);
      tr.addEventListener("click", function () { focusNode(id); });
      t.appendChild(tr);
    }
    // the model's own inputs and outputs first; a body's under its If/Loop/Scan, folded
    var main = ios.filter(function (id) { return !info[id].graph; });
    if (main.length) { var t = section("Model inputs and outputs"); main.forEach(function (id) { ioRow(t, id); }); }
    var owners = {}, ownerOrder = [];
    ios.forEach(function (id) {
      var g = info[id].graph;
      if (!g) { return; }
      if (!owners[g]) { owners[g] = []; ownerOrder.push(g); }
      owners[g].push(id);
    });
    if (ownerOrder.length) {
      panel.appendChild(el("h2", "Subgraph inputs and outputs"));
      ownerOrder.forEach(function (g) {
        var det = el("details"), tb = el("table");
        det.appendChild(el("summary", g + " (" + owners[g].length + ")"));
        owners[g].forEach(function (id) { ioRow(tb, id); });
        det.appendChild(tb);
        panel.appendChild(det);
      });
    }
    var names = Object.keys(ops).sort(function (a, b) { return ops[b] - ops[a] || (a < b ? -1 : 1); });
    if (names.length) {
      var to = section("Op types (click to search)");
      to.className = "list";
      names.forEach(function (op) {
        var tr = el("tr");
        tr.appendChild(el("td", String(ops[op]), "k"));
        tr.appendChild(el("td", op));
        tr.addEventListener("click", function () { search.value = op; runSearch(); goTo(0); });
        to.appendChild(tr);
      });
    }
  }
  svg.addEventListener("click", function (e) {
    if (port.moved()) { return; }
    var g = e.target.closest ? e.target.closest("g.node") : null;
    if (g) { setLit(g.id); show(g.id); }
  });
  document.querySelectorAll("tr[data-node]").forEach(function (r) {
    r.addEventListener("click", function () { focusNode(r.getAttribute("data-node")); });
  });

  // ------------------------------------------------------------------ summary groups (diff)
  var grouped = [];
  document.querySelectorAll("#groups li[data-group]").forEach(function (li) {
    li.addEventListener("click", function () {
      var group = (data.groups || [])[Number(li.getAttribute("data-group"))];
      if (!group) { return; }
      grouped.forEach(function (id) { if (boxes[id]) { boxes[id].g.classList.remove("grp"); } delete marks[id]; });
      document.querySelectorAll("#groups li.active").forEach(function (x) { x.classList.remove("active"); });
      li.classList.add("active");
      grouped = group.ids.filter(function (id) { return boxes[id]; });
      grouped.sort(function (a, b) { return boxes[a].y - boxes[b].y || boxes[a].x - boxes[b].x; });
      grouped.forEach(function (id) { boxes[id].g.classList.add("grp"); marks[id] = "#7b1fa2"; });
      drawOverview();
      showBox(grouped);
      showGroup(group, grouped);
    });
  });

  // ------------------------------------------------------------------ search
  var index = Object.keys(info).filter(function (id) { return boxes[id]; }).map(function (id) {
    var n = info[id], words = [n.op_type, n.name, n.input, n.output];
    (n.inputs || []).concat(n.outputs || []).forEach(function (r) { words.push(r.value); });
    words = words.filter(function (w) { return w; }).map(function (w) { return String(w).toLowerCase(); });
    return {id: id, words: words};
  });
  var matches = [], cur = -1, matched = [];
  function runSearch() {
    var q = search.value.trim().toLowerCase();
    matched.forEach(function (id) { boxes[id].g.classList.remove("match"); delete marks[id]; });
    matches = [];
    cur = -1;
    if (q) {
      var exact = [], partial = [];
      index.forEach(function (it) {
        if (it.words.indexOf(q) >= 0) { exact.push(it.id); }
        else if (it.words.some(function (w) { return w.indexOf(q) >= 0; })) { partial.push(it.id); }
      });
      var byY = function (a, b) { return boxes[a].y - boxes[b].y || boxes[a].x - boxes[b].x; };
      matches = exact.sort(byY).concat(partial.sort(byY));
    }
    matched = matches.slice(0, 1000);
    matched.forEach(function (id) { boxes[id].g.classList.add("match"); marks[id] = "#e8590c"; });
    hits.textContent = q ? (matches.length ? matches.length + " match" + (matches.length > 1 ? "es" : "") : "no match") : "";
    clear(results);
    matches.slice(0, 50).forEach(function (id, k) {
      var n = info[id], li = el("li");
      li.appendChild(el("span", n.op_type || (n.input !== undefined ? "input" : "output"), "op"));
      li.appendChild(document.createTextNode(n.name || n.input || n.output || ""));
      li.addEventListener("mousedown", function (e) { e.preventDefault(); goTo(k); });
      results.appendChild(li);
    });
    drawOverview();
  }
  function goTo(k) {
    if (!matches.length) { return; }
    cur = (k + matches.length) % matches.length;
    focusNode(matches[cur]);
    hits.textContent = (cur + 1) + " / " + matches.length;
    Array.prototype.forEach.call(results.children, function (li, j) { li.classList.toggle("cur", j === cur); });
  }
  graphtoolSearchKeys(search, results, runSearch, goTo, function () { return cur; }, 120);

  // ------------------------------------------------------------------ keys and buttons
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey || (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA"))) { return; }
    if (e.key === "/") { e.preventDefault(); search.focus(); search.select(); }
    else if (port.key(e)) { return; }
    else if (e.key === "Escape") { setLit(null); if (!(data.groups || []).length) { overviewPanel(); } }
  });
  drawOverview();  // first: the strip's width decides the view's
  opening();
  if (!(data.groups || []).length) { overviewPanel(); }
  else {  // a diff opens on its first group with a drawn node, lit and in view
    var firstGroup = Array.prototype.filter.call(document.querySelectorAll("#groups li[data-group]"), function (li) {
      var group = data.groups[Number(li.getAttribute("data-group"))];
      return group && group.ids.some(function (id) { return boxes[id]; });
    })[0];
    if (firstGroup) { firstGroup.click(); }
  }
  window.graphtool = {  // for tests and the bench: where the view is, the whole graph's box
    view: function () { var b = port.box(); return {x: b.x, y: b.y, w: b.w, h: b.h, scale: scale()}; },
    home: home, readableScale: readableScale, focus: focusNode};
  // ready: the first frame after set-up; the value is ms since navigation start (bench/page_speed.py)
  requestAnimationFrame(function () { document.body.setAttribute("data-ready", String(Math.round(performance.now()))); });
})();
