// The report's charts: draws every chart spec of the kanbench-charts JSON block with Chart.js
// and records on <body> how many were drawn and what went wrong (the browser test reads it).
// Embedded into report.html at build time (reports/CMakeLists.txt).
(function () {
  'use strict';
  var errors = [];
  window.addEventListener('error', function (event) { errors.push(String(event.message)); });
  var palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
                 '#7f7f7f', '#bcbd22', '#17becf'];
  var errorBars = {
    id: 'kanbenchErrorBars',
    afterDatasetsDraw: function (chart) {
      var ctx = chart.ctx, y = chart.scales.y;
      chart.data.datasets.forEach(function (dataset, i) {
        var meta = chart.getDatasetMeta(i);
        if (!dataset.errors || meta.hidden) return;
        meta.data.forEach(function (bar, j) {
          var range = dataset.errors[j];
          if (!range) return;
          var top = y.getPixelForValue(range[1]), bottom = y.getPixelForValue(range[0]);
          ctx.save();
          ctx.strokeStyle = '#222';
          ctx.lineWidth = 1.5;
          ctx.beginPath();
          ctx.moveTo(bar.x, top); ctx.lineTo(bar.x, bottom);
          ctx.moveTo(bar.x - 4, top); ctx.lineTo(bar.x + 4, top);
          ctx.moveTo(bar.x - 4, bottom); ctx.lineTo(bar.x + 4, bottom);
          ctx.stroke();
          ctx.restore();
        });
      });
    }
  };
  function axis(label, type) {
    var scale = { title: { display: !!label, text: label || '' } };
    if (type) scale.type = type;
    return scale;
  }
  function config(spec) {
    var options = {
      responsive: true, maintainAspectRatio: false, animation: false,
      plugins: { title: { display: true, text: spec.title }, legend: { display: !spec.small } }
    };
    if (spec.kind === 'bar') {
      options.scales = { y: axis(spec.y_label, spec.log_y ? 'logarithmic' : undefined),
                         x: axis('') };
      options.scales.y.beginAtZero = !spec.log_y;
      return {
        type: 'bar', options: options, plugins: [errorBars],
        data: {
          labels: spec.labels,
          datasets: spec.datasets.map(function (d, i) {
            return { label: d.label, data: d.data, errors: d.errors,
                     backgroundColor: palette[i % palette.length] };
          })
        }
      };
    }
    if (spec.kind === 'line') {
      options.scales = { y: axis(spec.y_label, spec.log_y ? 'logarithmic' : 'linear'),
                         x: axis(spec.x_label) };
      return {
        type: 'line', options: options,
        data: {
          labels: spec.labels,
          datasets: spec.datasets.map(function (d, i) {
            var color = palette[i % palette.length];
            return { label: d.label, data: d.data, borderColor: color, backgroundColor: color,
                     borderDash: i === 1 ? [6, 4] : [], pointRadius: 2, fill: false };
          })
        }
      };
    }
    if (spec.kind === 'xy') {
      // Lines through [x, y] points on numeric (optionally logarithmic) axes, over x_min..x_max
      // and y_min..y_max where the spec sets them. A dataset may set
      // its `color`, be points only (`line: false`), a step line (`stepped`: along x first, as a
      // Pareto front), or `dashed` (with its own `dash` pattern); a point may carry a label as
      // its third element, which its tooltip shows with `point_labels`.
      options.scales = { x: axis(spec.x_label, spec.log_x ? 'logarithmic' : 'linear'),
                         y: axis(spec.y_label, spec.log_y ? 'logarithmic' : 'linear') };
      ['x', 'y'].forEach(function (name) {
        if (spec[name + '_min'] !== undefined) options.scales[name].min = spec[name + '_min'];
        if (spec[name + '_max'] !== undefined) options.scales[name].max = spec[name + '_max'];
      });
      if (spec.point_labels) {
        options.plugins.tooltip = { callbacks: { label: function (item) {
          var where = '(' + item.parsed.x + ', ' + item.parsed.y.toPrecision(3) + ')';
          return item.dataset.label + ': ' + (item.raw.label ? item.raw.label + ' ' : '') + where;
        } } };
      }
      return {
        type: 'scatter', options: options,
        data: {
          datasets: spec.datasets.map(function (d, i) {
            var color = d.color || (d.dashed ? '#444' : palette[i % palette.length]);
            var lineOnly = d.dashed || d.stepped;
            return { label: d.label, showLine: d.line !== false,
                     stepped: d.stepped ? 'before' : false, borderColor: color,
                     backgroundColor: color, borderDash: d.dashed ? (d.dash || [6, 4]) : [],
                     pointRadius: lineOnly ? 0 : 3,
                     data: d.points.map(function (p) {
                       return p.length > 2 ? { x: p[0], y: p[1], label: p[2] } : { x: p[0], y: p[1] };
                     }) };
          })
        }
      };
    }
    // A curve phi(x); with `fit`, phi as points and the fit as a line (a symbolic edge).
    options.plugins.title.font = { size: 11 };
    options.scales = { x: { type: 'linear', ticks: { maxTicksLimit: 5 } },
                       y: { ticks: { maxTicksLimit: 5 } } };
    function points(ys) { return spec.x.map(function (x, k) { return { x: x, y: ys[k] }; }); }
    var datasets = [{
      label: spec.fit ? 'learned activation' : spec.title, showLine: !spec.fit,
      pointRadius: spec.fit ? 2 : 0, borderWidth: 2,
      borderColor: palette[0], backgroundColor: palette[0], data: points(spec.y)
    }];
    if (spec.fit) {
      // Drawn over the points (a lower order is drawn later).
      datasets[0].order = 1;
      datasets.push({ label: 'symbolic fit', showLine: true, pointRadius: 0, borderWidth: 1.5,
                      borderColor: palette[1], backgroundColor: palette[1], order: 0,
                      data: points(spec.fit) });
    }
    return { type: 'scatter', options: options, data: { datasets: datasets } };
  }
  function drawn(canvas) {
    try {
      var pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      for (var k = 3; k < pixels.length; k += 4) if (pixels[k] !== 0) return true;
    } catch (e) { errors.push(String(e)); }
    return false;
  }
  var total = 0, done = 0;
  try {
    if (typeof Chart === 'undefined') throw new Error('Chart.js did not load');
    var specs = JSON.parse(document.getElementById('kanbench-charts').textContent).charts;
    total = specs.length;
    specs.forEach(function (spec) {
      var canvas = document.getElementById(spec.id);
      if (!canvas) { errors.push('no canvas ' + spec.id); return; }
      try {
        new Chart(canvas, config(spec));
        if (drawn(canvas)) done += 1; else errors.push('nothing drawn in ' + spec.id);
      } catch (e) { errors.push(spec.id + ': ' + e); }
    });
  } catch (e) { errors.push(String(e)); }
  document.body.setAttribute('data-charts-total', String(total));
  document.body.setAttribute('data-charts-drawn', String(done));
  document.body.setAttribute('data-report-errors', errors.join(' | '));
  var status = document.getElementById('chart-status');
  if (status) {
    status.textContent = errors.length === 0 ? '' :
        'Some charts could not be drawn: ' + errors.join('; ');
    if (errors.length === 0) status.hidden = true;
  }
})();
