// jobtpu serve: draws the page's charts with uPlot (static/uplot.min.js, shipped in the package: no
// network). Each chart is a <div class="chart" data-chart="JSON"> the server wrote (web/charts.py);
// a redraw of the page's live part (page.js) brings new divs, drawn here again.
"use strict";
(function () {
  const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  // A job's timeline: each kind of time its own colour, as `report` names them.
  const PHASE = {"running": "#2ca02c", "detection": "#d62728", "delete+create": "#ff7f0e", "setup": "#9467bd", "launch": "#1f77b4"};

  function seriesOf(d) {
    return d.series.map((s, i) => {
      const colour = d.kind === "timeline" ? (PHASE[s.label] || COLOURS[i % COLOURS.length]) : COLOURS[i % COLOURS.length];
      const one = {label: s.label, stroke: colour, width: 2, scale: s.axis === "y2" ? "y2" : "y", spanGaps: true};
      if (d.kind === "steps" || d.kind === "timeline") {
        one.paths = uPlot.paths.stepped({align: 1});
        one.fill = colour + "55";
      } else if (d.kind === "bars") {
        one.paths = uPlot.paths.bars({size: [0.35, 60], align: s.axis === "y2" ? 1 : -1});
        one.fill = colour + "aa";
        one.points = {show: false};
      } else {
        one.points = {show: true, size: 5};
      }
      return one;
    });
  }

  function draw(box) {
    const d = JSON.parse(box.dataset.chart);
    if (!d.x.length || !d.series.length) {
      box.textContent = d.id === "chips" ? "no chips or GPUs were in use in these days" : "nothing to chart yet";
      box.classList.add("drawn", "empty");
      return;
    }
    const twoAxes = d.series.some((s) => s.axis === "y2");
    const axes = [{}, {scale: "y", label: d.kind === "bars" ? d.series[0].label : ""}];
    if (twoAxes) axes.push({scale: "y2", side: 1, grid: {show: false}, label: d.series.find((s) => s.axis === "y2").label});
    if (d.kind === "timeline") axes[1] = {show: false};
    // goodput is a percentage; counts (preemptions) start at 0 and go up at least to 1
    const counts = {range: (u, min, max) => [0, Math.max(1, max)]};
    const scales = {x: {time: d.time_x}, y: d.kind === "timeline" ? {range: [0, 1.2]} : d.kind === "bars" ? {range: [0, 100]}
      : d.kind === "steps" ? counts : {auto: true}, y2: counts};
    const opts = {
      width: Math.max(320, Math.min(box.clientWidth || 900, 1200)), height: d.kind === "timeline" ? 160 : 260,
      scales: scales,
      series: [{label: d.time_x ? "time" : "step"}, ...seriesOf(d)],
      axes: axes,
    };
    const data = [d.x, ...d.series.map((s) => s.values)];
    box.textContent = "";
    new uPlot(opts, data, box);
    box.classList.add("drawn");
  }

  function drawAll() {
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll("div.chart[data-chart]:not(.drawn)").forEach(draw);
  }
  document.addEventListener("jobtpu:redrawn", drawAll);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawAll); else drawAll();
})();
