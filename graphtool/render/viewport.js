// graphtool's view of a picture, shared by both pages (page.js: Graphviz's SVG; layers.js: the
// layered viewer): pan (drag, wheel), zoom (ctrl+wheel around the cursor, + and -, the buttons),
// fit (f), and the overview strip (a canvas of the whole picture with the view's frame; click or
// drag it to move). A page gives the picture's bounds, how to show a view, and how to paint its
// boxes on the strip; the view is ``screen = (world - (x, y)) * s``.
var graphtoolViewport = function (opts) {
  "use strict";
  var view = document.getElementById("view"), svg = opts.svg;
  var overview = document.getElementById("overview"), canvas = overview.querySelector("canvas");
  var frame = document.getElementById("frame"), legend = document.getElementById("legend");
  var vt = {x: 0, y: 0, s: 1}, ov = {k: 1, w: 0, h: 0};
  var minScale = opts.minScale || function () { return 0.02; }, maxScale = opts.maxScale || 8;
  function size() { return {w: view.clientWidth || 1, h: view.clientHeight || 1}; }
  var shown = null;  // the view's size when last shown: a resize keeps the centre of what was seen
  function apply() { shown = size(); opts.show(vt, shown); drawFrame(); }
  function within(c, half, lo, len, pad) {
    // keep the picture on screen: no more than ``pad`` of empty space past its edges
    if (2 * half >= len + 2 * pad) { return lo + len / 2; }
    return Math.max(lo - pad + half, Math.min(lo + len + pad - half, c));
  }
  function clampScale(s) { return Math.max(minScale(), Math.min(s, maxScale)); }
  function setView(s, cx, cy) {  // scale s, centred on world point (cx, cy)
    var z = size(), w = opts.world();
    vt.s = clampScale(s);
    var hw = z.w / 2 / vt.s, hh = z.h / 2 / vt.s;
    if (opts.onScreen) { cx = within(cx, hw, w.x, w.w, 24 / vt.s); cy = within(cy, hh, w.y, w.h, 24 / vt.s); }
    vt.x = cx - hw; vt.y = cy - hh;
    apply();
  }
  function fitScale() { var z = size(), w = opts.world(); return Math.min(z.w / w.w, z.h / w.h); }
  function fit(most) {  // the whole picture, but a small one no larger than ``most``
    var w = opts.world();
    setView(Math.min(fitScale(), most || 1.5), w.x + w.w / 2, w.y + w.h / 2);
  }
  function center() { var z = shown || size(); return {x: vt.x + z.w / 2 / vt.s, y: vt.y + z.h / 2 / vt.s}; }
  function zoomBy(k) { var c = center(); setView(vt.s * k, c.x, c.y); }
  function box() { var z = size(); return {x: vt.x, y: vt.y, w: z.w / vt.s, h: z.h / vt.s}; }
  function moveBy(dx, dy) { vt.x += dx; vt.y += dy; apply(); }

  // like a document (and Netron): the wheel scrolls, ctrl+wheel (a touchpad pinch) zooms
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    if (!e.ctrlKey && !e.metaKey) {
      var unit = e.deltaMode === 1 ? 16 : (e.deltaMode === 2 ? size().h : 1);
      moveBy((e.shiftKey && !e.deltaX ? e.deltaY : e.deltaX) * unit / vt.s, (e.shiftKey ? 0 : e.deltaY) * unit / vt.s);
      return;
    }
    var r = view.getBoundingClientRect(), sx = e.clientX - r.left, sy = e.clientY - r.top;
    var px = vt.x + sx / vt.s, py = vt.y + sy / vt.s;  // zoom around the cursor
    vt.s = clampScale(vt.s * Math.exp(-Math.max(-1, Math.min(1, e.deltaY * 0.01))));
    vt.x = px - sx / vt.s; vt.y = py - sy / vt.s;
    apply();
  }, {passive: false});
  var drag = null, moved = false;
  svg.addEventListener("mousedown", function (e) {
    drag = {x: e.clientX, y: e.clientY, vx: vt.x, vy: vt.y};
    moved = false;
    view.classList.add("dragging");
  });
  window.addEventListener("mousemove", function (e) {
    if (ovDrag) { ovJump(e); return; }
    if (!drag) { return; }
    if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 3) { moved = true; }
    vt.x = drag.vx - (e.clientX - drag.x) / vt.s; vt.y = drag.vy - (e.clientY - drag.y) / vt.s;
    apply();
  });
  window.addEventListener("mouseup", function () {
    drag = null; ovDrag = false;
    view.classList.remove("dragging");
    setTimeout(function () { moved = false; }, 0);  // after the click this mouseup makes
  });
  window.addEventListener("resize", function () { var c = center(); drawOverview(); setView(vt.s, c.x, c.y); });

  // the overview strip; a diff's legend sits under it and takes its height from the canvas
  function drawOverview() {
    var w = opts.world();
    var maxW = 150, maxH = Math.max(60, overview.clientHeight - 12 - (legend ? legend.offsetHeight + 8 : 0));
    ov.k = Math.min(maxW / w.w, maxH / w.h);
    ov.w = Math.max(24, Math.round(w.w * ov.k)); ov.h = Math.max(24, Math.round(w.h * ov.k));
    var dpr = window.devicePixelRatio || 1;
    canvas.width = ov.w * dpr; canvas.height = ov.h * dpr;
    canvas.style.width = ov.w + "px"; canvas.style.height = ov.h + "px";
    var c = canvas.getContext("2d");
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    c.clearRect(0, 0, ov.w, ov.h);
    // the page paints in strip pixels: rect(world box, colour, least size in px)
    opts.paint(c, function (b, color, least, stroke) {
      var bw = Math.max(least, b.w * ov.k), bh = Math.max(least, b.h * ov.k);
      var x = (b.x - w.x) * ov.k + (b.w * ov.k - bw) / 2, y = (b.y - w.y) * ov.k + (b.h * ov.k - bh) / 2;
      if (stroke) { c.strokeStyle = color; c.lineWidth = 1; c.strokeRect(x, y, bw, bh); } else { c.fillStyle = color; c.fillRect(x, y, bw, bh); }
    });
    drawFrame();
  }
  function drawFrame() {
    if (!ov.w) { return; }
    var w = opts.world(), v = box();
    var x = (v.x - w.x) * ov.k, y = (v.y - w.y) * ov.k;
    var x2 = Math.min(ov.w, x + v.w * ov.k), y2 = Math.min(ov.h, y + v.h * ov.k);
    x = Math.max(0, x); y = Math.max(0, y);
    frame.style.left = x + "px"; frame.style.top = y + "px";
    frame.style.width = Math.max(4, x2 - x) + "px"; frame.style.height = Math.max(4, y2 - y) + "px";
  }
  var ovDrag = false;
  function ovJump(e) {
    var r = canvas.getBoundingClientRect(), w = opts.world();
    setView(vt.s, w.x + (e.clientX - r.left) / ov.k, w.y + (e.clientY - r.top) / ov.k);
  }
  overview.addEventListener("mousedown", function (e) {
    if (legend && legend.contains(e.target)) { return; }
    ovDrag = true; ovJump(e); e.preventDefault(); e.stopPropagation();
  });

  document.getElementById("fit").addEventListener("click", function () { opts.fit ? opts.fit() : fit(); });
  document.getElementById("zoom-in").addEventListener("click", function () { zoomBy(1.25); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoomBy(0.8); });
  function key(e) {  // the view's keys outside the search box: true when the key was one
    if (e.key === "f") { opts.fit ? opts.fit() : fit(); } else if (e.key === "+" || e.key === "=") { zoomBy(1.25); } else if (e.key === "-" || e.key === "_") { zoomBy(0.8); } else { return false; }
    return true;
  }
  return {vt: vt, size: size, apply: apply, setView: setView, fit: fit, fitScale: fitScale, zoomBy: zoomBy,
          center: center, box: box, moveBy: moveBy, moved: function () { return moved; },
          drawOverview: drawOverview, drawFrame: drawFrame, key: key};
};

// The search box both pages share: ``run`` after typing stops for ``delay`` ms, Enter (Shift+Enter)
// the next (previous) match with the list closed, the arrows through the list, Escape to clear;
// leaving the box closes the list. ``cur()`` is the page's current match index.
var graphtoolSearchKeys = function (search, results, run, goTo, cur, delay) {
  var timer = null;
  function close() { while (results.firstChild) { results.removeChild(results.firstChild); } }
  search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(function () { timer = null; run(); }, delay); });
  search.addEventListener("keydown", function (e) {
    if (e.key === "Enter") {
      e.preventDefault();
      if (timer) { clearTimeout(timer); timer = null; run(); }
      goTo(e.shiftKey ? cur() - 1 : cur() + 1);
      close();  // the list would cover the panel; Enter again goes to the next match
    } else if (e.key === "Escape") {
      search.value = ""; run(); search.blur();
    } else if (e.key === "ArrowDown") { e.preventDefault(); goTo(cur() + 1); }
    else if (e.key === "ArrowUp") { e.preventDefault(); goTo(cur() - 1); }
  });
  search.addEventListener("blur", function () { setTimeout(close, 150); });
};
