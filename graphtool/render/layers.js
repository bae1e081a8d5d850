(function () {
  "use strict";
  // graphtool's layered viewer: the model arrives as columns of numbers and one string table
  // (render/layers.py); layers expand on click and each expanded layer is laid out here, when it is
  // first shown (a layered layout: ranks by longest path, barycentre ordering, centred columns).
  // Model text is only ever written with textContent; the page's CSP allows this script alone.
  var marks0 = {start: performance.now()};
  var D = JSON.parse(document.getElementById("gt-data").textContent);
  marks0.parsed = performance.now();
  var S = D.strings, L = D.layers, N = D.op.length, NL = L.parent.length;
  (function decode() {
    // counts -> offsets; value ids sent as steps from the largest id so far (null: no input)
    var insOff = new Int32Array(N + 1), outsOff = new Int32Array(N + 1), ins = new Int32Array(D.ins.length),
        outs = new Int32Array(D.outs.length), top = 0, i = 0, o = 0, k, j, v;
    for (k = 0; k < N; k++) {
      insOff[k] = i; outsOff[k] = o;
      for (j = 0; j < D.nIn[k]; j++, i++) {
        v = D.ins[i];
        if (v === null) { ins[i] = -1; continue; }
        ins[i] = v += top; if (v > top) { top = v; }
      }
      for (j = 0; j < D.nOut[k]; j++, o++) { outs[o] = v = D.outs[o] + top; if (v > top) { top = v; } }
    }
    insOff[N] = i; outsOff[N] = o;
    var nv = D.vName.length, prod = new Int32Array(nv).fill(-1), isConst = new Uint8Array(nv), full = new Int32Array(nv);
    for (k = 0; k < N; k++) { for (j = outsOff[k]; j < outsOff[k + 1]; j++) { prod[outs[j]] = k; } }
    D.vConst.forEach(function (x) { isConst[x] = 1; });
    D.vFull.forEach(function (p) { full[p[0]] = p[1]; });
    D.insOff = insOff; D.outsOff = outsOff; D.ins = ins; D.outs = outs; D.vProd = prod; D.vConst = isConst; D.vFull = full;
  })();
  var SVGNS = "http://www.w3.org/2000/svg";
  var view = document.getElementById("view"), panel = document.getElementById("details");
  var search = document.getElementById("search"), hits = document.getElementById("hits");
  var results = document.getElementById("results");
  var READABLE = 12;  // px of the smallest box text at the opening zoom

  // ------------------------------------------------------------------ structure
  var kids = [], nodeLayer = new Int32Array(N), depth = new Int32Array(NL), l, k;
  for (l = 0; l < NL; l++) { kids.push([]); }
  for (l = 1; l < NL; l++) { kids[L.parent[l]].push(l); depth[l] = depth[L.parent[l]] + 1; }
  for (l = 0; l < NL; l++) { for (k = L.lo[l]; k < L.mid[l]; k++) { nodeLayer[k] = l; } }
  var expanded = new Uint8Array(NL);
  expanded[0] = 1;
  function opName(k) { return D.ops[D.op[k]]; }
  // a name sent as -(i + 1) is its layer's prefix (L.pre of the scope around it) + strings[i]
  function preOf(k) { return L.pre[nodeLayer[k]]; }
  function nodeName(k) { var i = D.name[k]; return i < 0 ? preOf(k) + S[-i - 1] : S[i]; }
  function valueName(v) { var i = D.vName[v]; return i < 0 ? preOf(D.vProd[v]) + S[-i - 1] : S[i]; }
  function cat(k) { return D.cats[D.op[k]]; }
  function isIo(k) { var c = cat(k); return c === "io" || c === "output"; }
  function opsIn(l) {  // ops (not graph inputs/outputs) inside layer l
    var n = 0;
    for (var k = L.lo[l]; k < L.hi[l]; k++) { if (!isIo(k)) { n++; } }
    return n;
  }
  var opCount = new Int32Array(NL);
  (function () {  // ops per layer, children before parents
    for (var k = 0; k < N; k++) { if (!isIo(k)) { opCount[nodeLayer[k]]++; } }
    for (var l = NL - 1; l > 0; l--) { opCount[L.parent[l]] += opCount[l]; }
  })();
  function itemOf(k, g) {  // the item of layer g that holds op k: "n<k>" or "l<layer>", or null
    var l = nodeLayer[k];
    if (l === g) { return "n" + k; }
    while (l >= 0 && L.parent[l] !== g) { l = L.parent[l]; }
    return l < 0 ? null : "l" + l;
  }
  function fullType(v) { return S[D.vFull[v] || D.vType[v]]; }
  function shortType(v) { var t = S[D.vType[v]]; var i = t.indexOf(" "); return i < 0 ? t : t.slice(i + 1); }

  // ------------------------------------------------------------------ measuring text
  var ctx2d = document.createElement("canvas").getContext("2d");
  var FONT_B = "bold 12px system-ui, sans-serif", FONT_S = "10px system-ui, sans-serif";
  function textWidth(text, font) { ctx2d.font = font; return ctx2d.measureText(text).width; }
  function cut(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }

  // what one item says: lines of [text, font, colour]
  function nodeLines(k) {
    var op = opName(k), lines;
    if (op === "input" || op === "output") {
      var v = op === "input" ? D.outs[D.outsOff[k]] : D.ins[D.insOff[k]];
      lines = [[cut(nodeName(k), 36), FONT_B], [cut(S[D.vType[v]] || op, 40), FONT_S]];
      return lines;
    }
    lines = [[op, FONT_B]];
    if (D.sub[k]) { lines.push([cut(S[D.sub[k]], 44), FONT_S]); }
    var shapes = [];
    for (var j = D.outsOff[k]; j < D.outsOff[k + 1] && shapes.length < 3; j++) {
      var t = shortType(D.outs[j]);
      if (t) { shapes.push(t); }
    }
    if (shapes.length) { lines.push(["→ " + cut(shapes.join(", "), 40), FONT_S]); }
    return lines;
  }
  function layerLines(l) {
    var n = opCount[l];
    return [[cut(L.label[l] || "layer", 44), FONT_B], [n + " op" + (n === 1 ? "" : "s") + "  ▸", FONT_S]];
  }
  var sizeCache = {};
  function boxSize(item) {
    var s = sizeCache[item];
    if (s) { return s; }
    var lines = item[0] === "n" ? nodeLines(+item.slice(1)) : layerLines(+item.slice(1));
    var w = 0;
    lines.forEach(function (ln) { w = Math.max(w, textWidth(ln[0], ln[1])); });
    s = sizeCache[item] = {w: Math.ceil(w) + 16, h: 8 + lines.reduce(function (h, ln) { return h + (ln[1] === FONT_B ? 15 : 13); }, 0),
                           lines: lines};
    return s;
  }

  // ------------------------------------------------------------------ edges of a layer
  var edgeCache = {};
  function layerEdges(g) {
    if (edgeCache[g]) { return edgeCache[g]; }
    var lo = L.lo[g], hi = L.hi[g], seen = {}, out = [];
    var memo = {};  // op -> item, for producers read several times
    for (var k = lo; k < hi; k++) {
      var b = null;
      for (var j = D.insOff[k]; j < D.insOff[k + 1]; j++) {
        var v = D.ins[j];
        if (v < 0 || D.vConst[v]) { continue; }
        var p = D.vProd[v];
        if (p < lo || p >= hi) { continue; }
        if (b === null) { b = itemOf(k, g); }
        var a = memo[p];
        if (a === undefined) { a = memo[p] = itemOf(p, g); }
        if (a === b) { continue; }
        var key = a + ">" + b;
        if (!seen[key]) { seen[key] = 1; out.push({a: a, b: b, v: v}); }
      }
    }
    edgeCache[g] = out;
    return out;
  }
  function layerItems(g) {
    var items = [];
    for (var k = L.lo[g]; k < L.mid[g]; k++) { items.push("n" + k); }
    kids[g].forEach(function (c) { items.push("l" + c); });
    return items;
  }

  // ------------------------------------------------------------------ layout of one layer
  var layoutCache = {};
  function headText(g) { return "▾ " + cut(L.label[g] || "layer", 60) + "  ·  " + opCount[g] + " ops"; }
  var GAP_X = 18, GAP_Y = 30, PAD = 12, HEAD = 22;
  function itemSize(item) {
    if (item[0] === "l" && expanded[+item.slice(1)]) { var lay = layout(+item.slice(1)); return {w: lay.w, h: lay.h}; }
    return boxSize(item);
  }
  function layout(g) {
    if (layoutCache[g]) { return layoutCache[g]; }
    var items = layerItems(g), edges = layerEdges(g), n = items.length;
    var index = {}, i;
    items.forEach(function (it, i) { index[it] = i; });
    var size = items.map(itemSize);
    var succ = items.map(function () { return []; }), pred = items.map(function () { return []; });
    // break cycles (a layer can feed another that feeds it back): depth-first, back edges reversed
    var state = new Int8Array(n), es = [];
    edges.forEach(function (e) { es.push([index[e.a], index[e.b], e]); });
    var adj = items.map(function () { return []; });
    es.forEach(function (e, j) { adj[e[0]].push(j); });
    for (i = 0; i < n; i++) {
      if (state[i]) { continue; }
      var stack = [[i, 0]];
      state[i] = 1;
      while (stack.length) {
        var top = stack[stack.length - 1], u = top[0];
        if (top[1] < adj[u].length) {
          var e = es[adj[u][top[1]++]], w = e[1];
          if (state[w] === 1) { e.push(true); }  // reversed
          else if (!state[w]) { state[w] = 1; stack.push([w, 0]); }
        } else { state[u] = 2; stack.pop(); }
      }
    }
    es.forEach(function (e) {
      var a = e[3] ? e[1] : e[0], b = e[3] ? e[0] : e[1];
      succ[a].push(b); pred[b].push(a);
    });
    // ranks: longest path from the sources, then sources pulled down next to their readers
    var rank = new Int32Array(n), indeg = new Int32Array(n), queue = [], order = [];
    for (i = 0; i < n; i++) { indeg[i] = pred[i].length; if (!indeg[i]) { queue.push(i); } }
    while (queue.length) {
      var a = queue.shift();
      order.push(a);
      succ[a].forEach(function (b) { rank[b] = Math.max(rank[b], rank[a] + 1); if (--indeg[b] === 0) { queue.push(b); } });
    }
    for (i = order.length - 1; i >= 0; i--) {
      var x = order[i];
      if (!pred[x].length && succ[x].length) {
        var m = Infinity;
        succ[x].forEach(function (b) { m = Math.min(m, rank[b] - 1); });
        rank[x] = Math.max(0, m);
      }
    }
    // long edges get one dummy per rank they cross, so they route around the boxes
    var nodes = [];  // {item|null, rank, w, h, up: [], down: []}
    for (i = 0; i < n; i++) { nodes.push({item: items[i], rank: rank[i], w: size[i].w, h: size[i].h, up: [], down: []}); }
    var paths = [];
    es.forEach(function (e) {
      var a = e[3] ? e[1] : e[0], b = e[3] ? e[0] : e[1], chain = [a];
      for (var r = rank[a] + 1; r < rank[b]; r++) {
        nodes.push({item: null, rank: r, w: 4, h: 4, up: [], down: []});
        chain.push(nodes.length - 1);
      }
      chain.push(b);
      for (var c = 1; c < chain.length; c++) { nodes[chain[c - 1]].down.push(chain[c]); nodes[chain[c]].up.push(chain[c - 1]); }
      paths.push({chain: e[3] ? chain.slice().reverse() : chain, edge: e[2]});
    });
    var ranks = [];
    nodes.forEach(function (nd, j) { (ranks[nd.rank] = ranks[nd.rank] || []).push(j); });
    for (i = 0; i < ranks.length; i++) { ranks[i] = ranks[i] || []; }
    var pos = new Float64Array(nodes.length);
    function setPos() { ranks.forEach(function (r) { r.forEach(function (j, o) { pos[j] = o; }); }); }
    setPos();
    function bary(r, dir) {
      var key = {};
      r.forEach(function (j) {
        var nb = dir ? nodes[j].up : nodes[j].down;
        if (!nb.length) { key[j] = pos[j]; return; }
        var s = 0; nb.forEach(function (q) { s += pos[q]; }); key[j] = s / nb.length;
      });
      r.sort(function (p, q) { return key[p] - key[q] || pos[p] - pos[q]; });
      r.forEach(function (j, o) { pos[j] = o; });
    }
    for (var sweep = 0; sweep < 6; sweep++) {
      if (sweep % 2 === 0) { for (i = 1; i < ranks.length; i++) { bary(ranks[i], true); } }
      else { for (i = ranks.length - 2; i >= 0; i--) { bary(ranks[i], false); } }
    }
    // x: each box as near the mean of its neighbours as its rank's order allows
    var xs = new Float64Array(nodes.length);
    ranks.forEach(function (r) { var x = 0; r.forEach(function (j) { xs[j] = x + nodes[j].w / 2; x += nodes[j].w + GAP_X; }); });
    function place(r, want) {
      var left = [], right = [], m = r.length, q;
      for (q = 0; q < m; q++) {
        var j = r[q], lim = q ? left[q - 1] + (nodes[r[q - 1]].w + nodes[j].w) / 2 + GAP_X : -Infinity;
        left.push(Math.max(want[q], lim));
      }
      for (q = m - 1; q >= 0; q--) {
        var jj = r[q], lim2 = q < m - 1 ? right[0] - (nodes[r[q + 1]].w + nodes[jj].w) / 2 - GAP_X : Infinity;
        right.unshift(Math.min(want[q], lim2));
      }
      var prev = -Infinity;
      for (q = 0; q < m; q++) {
        var j2 = r[q], x = (left[q] + right[q]) / 2;
        if (q) { x = Math.max(x, prev + (nodes[r[q - 1]].w + nodes[j2].w) / 2 + GAP_X); }
        xs[j2] = x; prev = x;
      }
    }
    for (sweep = 0; sweep < 8; sweep++) {
      var down = sweep % 2 === 0, lst = down ? ranks : ranks.slice().reverse();
      lst.forEach(function (r) {
        var want = r.map(function (j) {
          var nb = (down ? nodes[j].up : nodes[j].down);
          if (!nb.length) { nb = down ? nodes[j].down : nodes[j].up; }
          if (!nb.length) { return xs[j]; }
          var s = 0; nb.forEach(function (q) { s += xs[q]; }); return s / nb.length;
        });
        place(r, want);
      });
    }
    var minX = Infinity, maxX = -Infinity;
    nodes.forEach(function (nd, j) { minX = Math.min(minX, xs[j] - nd.w / 2); maxX = Math.max(maxX, xs[j] + nd.w / 2); });
    if (!nodes.length) { minX = maxX = 0; }
    var ys = [], y = 0;
    ranks.forEach(function (r, ri) {
      var h = 0;
      r.forEach(function (j) { h = Math.max(h, nodes[j].h); });
      ys[ri] = {top: y, h: h};
      y += h + GAP_Y;
    });
    var top = g === 0 ? PAD : HEAD + 6;
    var out = {w: Math.max(maxX - minX + 2 * PAD, g === 0 ? 0 : textWidth(headText(g), FONT_B) + 20), h: y - GAP_Y + top + PAD,
               pos: {}, edges: []};
    var shift = PAD - minX;
    if (out.w > maxX - minX + 2 * PAD) { shift += (out.w - (maxX - minX + 2 * PAD)) / 2; }
    function center(j) { var nd = nodes[j], r = ys[nd.rank]; return {x: xs[j] + shift, y: top + r.top + r.h / 2}; }
    nodes.forEach(function (nd, j) {
      if (nd.item === null) { return; }
      var c = center(j);
      out.pos[nd.item] = {x: c.x - nd.w / 2, y: c.y - nd.h / 2, w: nd.w, h: nd.h};
    });
    paths.forEach(function (p) {
      var pts = [], ch = p.chain;
      ch.forEach(function (j, c) {
        var q = center(j), nd = nodes[j];
        if (c === 0) { pts.push([q.x, q.y + nd.h / 2]); }
        else if (c === ch.length - 1) { pts.push([q.x, q.y - nd.h / 2]); }
        else { pts.push([q.x, q.y - ys[nd.rank].h / 2], [q.x, q.y + ys[nd.rank].h / 2]); }
      });
      out.edges.push({points: pts, v: p.edge.v, a: p.edge.a, b: p.edge.b});
    });
    if (g === 0) { out.h = Math.max(out.h, 40); }
    layoutCache[g] = out;
    return out;
  }
  function invalidate(g) { for (var l = g; l >= 0; l = L.parent[l]) { delete layoutCache[l]; } }

  // ------------------------------------------------------------------ drawing
  var svg = document.createElementNS(SVGNS, "svg");
  var scene = document.createElementNS(SVGNS, "g");
  svg.appendChild(scene);
  view.appendChild(svg);
  var placed = {};  // item -> absolute box, for what is drawn now
  var vt = {x: 0, y: 0, s: 1};  // screen = (world - (x, y)) * s
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

  // ------------------------------------------------------------------ view: pan and zoom
  function size() { return {w: view.clientWidth || 1, h: view.clientHeight || 1}; }
  function apply() {
    scene.setAttribute("transform", "scale(" + vt.s + ") translate(" + (-vt.x) + "," + (-vt.y) + ")");
    drawFrame();
  }
  function setView(s, cx, cy) {
    var z = size();
    vt.s = Math.max(0.02, Math.min(s, 8));
    vt.x = cx - z.w / 2 / vt.s; vt.y = cy - z.h / 2 / vt.s;
    apply();
  }
  function fitScale() { var z = size(); return Math.min(z.w / world.w, z.h / world.h); }
  function fit() { setView(Math.min(fitScale(), 1.5), world.w / 2, world.h / 2); }
  function zoomBy(f) { var z = size(); setView(vt.s * f, vt.x + z.w / 2 / vt.s, vt.y + z.h / 2 / vt.s); }
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = svg.getBoundingClientRect();
    if (!e.ctrlKey && !e.metaKey) {
      var unit = e.deltaMode === 1 ? 16 : (e.deltaMode === 2 ? size().h : 1);
      vt.x += (e.shiftKey && !e.deltaX ? e.deltaY : e.deltaX) * unit / vt.s;
      vt.y += (e.shiftKey ? 0 : e.deltaY) * unit / vt.s;
      apply();
      return;
    }
    var f = Math.exp(-Math.max(-1, Math.min(1, e.deltaY * 0.01)));
    var px = vt.x + (e.clientX - r.left) / vt.s, py = vt.y + (e.clientY - r.top) / vt.s;
    vt.s = Math.max(0.02, Math.min(vt.s * f, 8));
    vt.x = px - (e.clientX - r.left) / vt.s; vt.y = py - (e.clientY - r.top) / vt.s;
    apply();
  }, {passive: false});
  var drag = null, moved = false;
  svg.addEventListener("mousedown", function (e) { drag = {x: e.clientX, y: e.clientY, vx: vt.x, vy: vt.y}; moved = false; view.classList.add("dragging"); });
  window.addEventListener("mousemove", function (e) {
    if (!drag) { return; }
    if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 3) { moved = true; }
    vt.x = drag.vx - (e.clientX - drag.x) / vt.s; vt.y = drag.vy - (e.clientY - drag.y) / vt.s;
    apply();
  });
  window.addEventListener("mouseup", function () { drag = null; view.classList.remove("dragging"); setTimeout(function () { moved = false; }, 0); });
  window.addEventListener("resize", function () { drawOverview(); apply(); });

  // ------------------------------------------------------------------ overview
  var overview = document.getElementById("overview"), canvas = overview.querySelector("canvas");
  var frameEl = document.getElementById("frame"), ov = {k: 1, w: 0, h: 0};
  function drawOverview() {
    var maxW = 150, maxH = Math.max(60, overview.clientHeight - 12);
    ov.k = Math.min(maxW / world.w, maxH / world.h);
    ov.w = Math.max(24, Math.round(world.w * ov.k)); ov.h = Math.max(24, Math.round(world.h * ov.k));
    var dpr = window.devicePixelRatio || 1;
    canvas.width = ov.w * dpr; canvas.height = ov.h * dpr;
    canvas.style.width = ov.w + "px"; canvas.style.height = ov.h + "px";
    var c = canvas.getContext("2d");
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    c.clearRect(0, 0, ov.w, ov.h);
    Object.keys(placed).forEach(function (item) {
      var b = placed[item], id = +item.slice(1);
      if (item[0] === "l") {
        c.strokeStyle = "#8aa"; c.lineWidth = 1;
        c.strokeRect(b.x * ov.k, b.y * ov.k, Math.max(1, b.w * ov.k), Math.max(1, b.h * ov.k));
        if (!expanded[id]) { c.fillStyle = "#dfe7f1"; c.fillRect(b.x * ov.k, b.y * ov.k, Math.max(1.5, b.w * ov.k), Math.max(1.5, b.h * ov.k)); }
      } else {
        c.fillStyle = marks.indexOf(id) >= 0 ? "#e8590c" : (D.colors[cat(id)] || "#666");
        c.fillRect(b.x * ov.k, b.y * ov.k, Math.max(1.5, b.w * ov.k), Math.max(1.5, b.h * ov.k));
      }
    });
    drawFrame();
  }
  function drawFrame() {
    if (!ov.w) { return; }
    var z = size();
    var x = vt.x * ov.k, y = vt.y * ov.k, x2 = Math.min(ov.w, x + z.w / vt.s * ov.k), y2 = Math.min(ov.h, y + z.h / vt.s * ov.k);
    x = Math.max(0, x); y = Math.max(0, y);
    frameEl.style.left = x + "px"; frameEl.style.top = y + "px";
    frameEl.style.width = Math.max(4, x2 - x) + "px"; frameEl.style.height = Math.max(4, y2 - y) + "px";
  }
  var ovDrag = false;
  function ovJump(e) {
    var r = canvas.getBoundingClientRect();
    setView(vt.s, (e.clientX - r.left) / ov.k, (e.clientY - r.top) / ov.k);
  }
  overview.addEventListener("mousedown", function (e) { ovDrag = true; ovJump(e); e.preventDefault(); });
  window.addEventListener("mousemove", function (e) { if (ovDrag) { ovJump(e); } });
  window.addEventListener("mouseup", function () { ovDrag = false; });

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
    if (moved) { return; }
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
  var timer = null;
  search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(runSearch, 200); });
  search.addEventListener("keydown", function (e) {
    if (e.key === "Enter") {
      e.preventDefault();
      if (timer) { clearTimeout(timer); timer = null; runSearch(); }
      goTo(e.shiftKey ? cur - 1 : cur + 1);
      clear(results);
    } else if (e.key === "Escape") { search.value = ""; runSearch(); search.blur(); }
    else if (e.key === "ArrowDown") { e.preventDefault(); goTo(cur + 1); }
    else if (e.key === "ArrowUp") { e.preventDefault(); goTo(cur - 1); }
  });
  search.addEventListener("blur", function () { setTimeout(function () { clear(results); }, 150); });
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey || (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA"))) { return; }
    if (e.key === "/") { e.preventDefault(); search.focus(); search.select(); }
    else if (e.key === "f") { fit(); }
    else if (e.key === "+" || e.key === "=") { zoomBy(1.25); }
    else if (e.key === "-" || e.key === "_") { zoomBy(0.8); }
    else if (e.key === "Escape") { setLit(null); overviewPanel(); }
  });
  document.getElementById("fit").addEventListener("click", fit);
  document.getElementById("zoom-in").addEventListener("click", function () { zoomBy(1.25); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoomBy(0.8); });

  marks0.structure = performance.now();
  opening();
  marks0.drawn = performance.now();
  overviewPanel();
  marks0.panel = performance.now();
  document.body.setAttribute("data-phases", JSON.stringify(marks0));
  window.graphtool = {  // for tests and the bench
    view: function () { return {x: vt.x, y: vt.y, s: vt.s, w: size().w / vt.s, h: size().h / vt.s}; },
    reveal: reveal, toggle: toggle, placed: function () { return placed; }, layout: layout,
    find: function (name) { for (var k = 0; k < N; k++) { if (nodeName(k) === name) { return k; } } return -1; },
    name: nodeName,
    count: N, layers: NL};
  // ready: after the first frame with the picture was painted (a task queued from the frame's callback)
  requestAnimationFrame(function () { setTimeout(function () { document.body.setAttribute("data-ready", String(Math.round(performance.now()))); }, 0); });
})();
