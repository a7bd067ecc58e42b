// BoltMQ console: confirmations, message body views, the Overview's live chart.
"use strict";

document.querySelectorAll("form[data-confirm]").forEach(function (form) {
  form.addEventListener("submit", function (event) {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
});

document.querySelectorAll(".body-views").forEach(function (box) {
  box.querySelectorAll("button[data-view]").forEach(function (button) {
    button.addEventListener("click", function () {
      box.querySelectorAll("pre.body").forEach(function (pre) {
        pre.hidden = !pre.classList.contains("body-" + button.dataset.view);
      });
    });
  });
});

(function rates() {
  var box = document.getElementById("rates");
  if (!box) return;
  var status = document.getElementById("rates-status");
  var keep = 10 * 60;  // seconds of points kept: the last ten minutes
  var data = [[], [], []];
  var chart = null;
  function draw() {
    if (typeof uPlot === "undefined") {
      var n = data[0].length;
      status.textContent = "produced " + data[1][n - 1] + " msg/s, consumed " + data[2][n - 1] +
        " msg/s (the chart library is not installed: make console-assets)";
      return;
    }
    if (chart === null) {
      status.textContent = "";
      chart = new uPlot({
        width: Math.min(740, box.clientWidth - 16), height: 240,
        series: [{}, {label: "produced msg/s", stroke: "#1f6feb"},
                 {label: "consumed msg/s", stroke: "#2da44e"}],
        scales: {x: {time: true, range: function (u, min, max) { return [max - keep, max]; }},
                 y: {range: function (u, min, max) { return [0, Math.max(1, max * 1.2)]; }}},
        axes: [{}, {label: "msg/s"}],
      }, data, box);
    } else {
      chart.setData(data);
    }
  }
  function poll() {
    fetch(box.dataset.url, {credentials: "same-origin"}).then(function (r) { return r.json(); })
      .then(function (point) {
        if (point.error) { status.textContent = point.error; return; }
        data[0].push(point.t); data[1].push(point.produced); data[2].push(point.consumed);
        while (data[0].length && data[0][0] < point.t - keep) data.forEach(function (s) { s.shift(); });
        box.dataset.points = String(data[0].length);
        draw();
      })
      .catch(function (err) { status.textContent = "rates: " + err; });
  }
  poll();
  setInterval(poll, 5000);
})();
