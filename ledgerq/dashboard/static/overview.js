// Draws the overview's two charts from the JSON the page carries (no inline script).
(function () {
  "use strict";
  function draw() {
    var data = JSON.parse(document.getElementById("series").textContent);
    var x = data.x;
    function width(el) { return Math.max(300, el.clientWidth); }
    var base = { height: 220, legend: { live: true }, cursor: { drag: { x: false, y: false } },
                 scales: { x: { time: true } } };
    var el1 = document.getElementById("chart-throughput");
    new uPlot(Object.assign({}, base, {
      width: width(el1),
      series: [{},
        { label: "succeeded", stroke: "#1f8a4c", fill: "rgba(31,138,76,0.08)", width: 2 },
        { label: "dead", stroke: "#c0392b", width: 2 },
        { label: "cancelled", stroke: "#8a7a55", width: 1.5 }],
      axes: [{}, { size: 50 }]
    }), [x, data.succeeded, data.dead, data.cancelled], el1);
    var el2 = document.getElementById("chart-rate");
    new uPlot(Object.assign({}, base, {
      width: width(el2),
      scales: { x: { time: true }, y: { range: [0, 100] } },
      series: [{}, { label: "success %", stroke: "#2f5bd3", width: 2, spanGaps: false,
                     points: { show: true, size: 5, fill: "#2f5bd3" },
                     value: function (u, v) { return v == null ? "–" : v.toFixed(1) + " %"; } }],
      axes: [{}, { size: 50, values: function (u, vs) { return vs.map(function (v) { return v + " %"; }); } }]
    }), [x, data.rate], el2);
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", draw); } else { draw(); }
})();
