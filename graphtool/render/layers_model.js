// The layered page's model (render/layers.py's columns, decoded): who is in which layer, names,
// types, op counts. Part of the layered page's one script (render/html.py puts viewport.js,
// layers_model.js, layers_layout.js and layers.js in one scope, in that order).
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

