// The layout of one expanded layer (render/layers.js draws it): what a box says and its size,
// the edges between a layer's items, and a layered layout (ranks by longest path, barycentre
// ordering, centred columns), cached per layer until a layer inside it opens or folds.
// Reads layers_model.js's names; nothing here touches the page.
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

