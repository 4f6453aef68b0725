// worqr dashboard: confirmations, the throughput chart, live counts over SSE.
(function () {
  "use strict";
  var base = document.body.dataset.base || "";

  document.querySelectorAll("form[data-confirm]").forEach(function (f) {
    f.addEventListener("submit", function (e) {
      if (!window.confirm(f.dataset.confirm)) e.preventDefault();
    });
  });

  document.querySelectorAll("button[data-confirm]").forEach(function (b) {
    b.addEventListener("click", function (e) {
      if (!window.confirm(b.dataset.confirm)) e.preventDefault();
    });
  });

  // Row selection: a checkbox per task, one for the page; the buttons
  // that act on a selection wait for one.
  var picks = document.querySelectorAll("input.pick");
  var all = document.getElementById("select-all");
  function selection() {
    var n = 0;
    picks.forEach(function (c) {
      if (c.checked) n++;
      var row = c.closest("tr");
      if (row) row.classList.toggle("sel", c.checked);
    });
    var ns = document.getElementById("nsel");
    if (ns) ns.textContent = String(n);
    document.querySelectorAll("button[data-needs-selection]").forEach(function (b) { b.disabled = n === 0; });
    if (all) { all.checked = n > 0 && n === picks.length; all.indeterminate = n > 0 && n < picks.length; }
  }
  picks.forEach(function (c) { c.addEventListener("change", selection); });
  if (all) all.addEventListener("change", function () { picks.forEach(function (c) { c.checked = all.checked; }); selection(); });
  selection();

  var NS = "http://www.w3.org/2000/svg";
  var chartEl = document.getElementById("chart");
  var chart = chartEl ? JSON.parse(chartEl.dataset.chart || "[]") : [];

  function el(name, attrs, text) {
    var n = document.createElementNS(NS, name);
    for (var k in attrs) n.setAttribute(k, attrs[k]);
    if (text !== undefined) n.textContent = text;
    return n;
  }

  // compact writes an axis value short: 950, 1.2k, 34k, 3.4M, 1.2G.
  function compact(n) {
    var units = [[1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(n) >= units[i][0]) {
        var v = n / units[i][0];
        return (v >= 100 || v % 1 === 0 ? String(Math.round(v)) : v.toFixed(1).replace(/\.0$/, "")) + units[i][1];
      }
    }
    return String(Math.round(n));
  }

  // niceStep is a round step (1, 2 or 5 times a power of ten, at least 1:
  // the counts are whole) that splits max into about n intervals.
  function niceStep(max, n) {
    var raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    return Math.max(1, (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p);
  }

  // draw draws the chart at the element's own pixel width (the text is not
  // stretched), with room on the left for the longest y-axis label.
  function draw() {
    if (!chartEl) return;
    while (chartEl.firstChild) chartEl.removeChild(chartEl.firstChild);
    var W = Math.round(chartEl.getBoundingClientRect().width) || 900, H = 180, B = 18, T = 10, n = chart.length || 60;
    chartEl.setAttribute("viewBox", "0 0 " + W + " " + H);
    var max = 1;
    chart.forEach(function (b) { max = Math.max(max, b.done + b.failed, b.enqueued); });
    var step = niceStep(max, 4), top = Math.ceil(max / step) * step;
    var y = function (v) { return T + (H - T - B) * (1 - v / top); };
    var labels = [];
    for (var v = 0; v <= top; v += step) {
      var t = el("text", { y: y(v) + 3, "text-anchor": "end", "class": "ax", "data-axis": "y" }, compact(v));
      chartEl.appendChild(t);
      labels.push(t);
    }
    var lw = 0;
    labels.forEach(function (t) { lw = Math.max(lw, t.getComputedTextLength ? t.getComputedTextLength() : t.textContent.length * 7); });
    var L = Math.ceil(lw) + 12;
    labels.forEach(function (t) {
      t.setAttribute("x", L - 6);
      chartEl.insertBefore(el("line", { x1: L, x2: W, y1: t.getAttribute("y") - 3, y2: t.getAttribute("y") - 3, "class": "gl" }), chartEl.firstChild);
    });
    var bw = (W - L) / n;
    chart.forEach(function (b, i) {
      var x = L + i * bw + 1, w = Math.max(bw - 2, 1);
      if (b.done) chartEl.appendChild(el("rect", { x: x, width: w, y: y(b.done), height: y(0) - y(b.done), "class": "b-done", rx: 1 }));
      if (b.failed) chartEl.appendChild(el("rect", { x: x, width: w, y: y(b.done + b.failed), height: y(b.done) - y(b.done + b.failed), "class": "b-failed", rx: 1 }));
    });
    var pts = chart.map(function (b, i) { return (L + i * bw + bw / 2).toFixed(1) + "," + y(b.enqueued).toFixed(1); });
    chartEl.appendChild(el("polyline", { points: pts.join(" "), "class": "b-enq" }));
    [0, 15, 30, 45, 59].forEach(function (i) {
      chartEl.appendChild(el("text", { x: i === 59 ? W : L + i * bw + bw / 2, y: H - 4, "text-anchor": i === 59 ? "end" : "middle", "class": "ax" }, i === 59 ? "now" : "-" + (59 - i) + "m"));
    });
    chart.forEach(function (b, i) {
      var r = el("rect", { x: L + i * bw, y: T, width: bw, height: H - T - B, fill: "transparent" });
      r.appendChild(el("title", {}, new Date(b.t * 60000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) +
        ": " + b.done + " done, " + b.failed + " failed, " + b.enqueued + " enqueued"));
      chartEl.appendChild(r);
    });
  }
  var resized = 0;
  window.addEventListener("resize", function () { clearTimeout(resized); resized = setTimeout(draw, 100); });
  draw();

  // minute merges one minute of history from the server: it replaces the
  // same minute, or is appended (after any skipped minutes, as zeros).
  function minute(b) {
    if (!chart.length || chartEl.dataset.queue) return; // live minutes are every queue's
    for (var i = chart.length - 1; i >= 0; i--) {
      if (chart[i].t === b.t) { chart[i] = b; draw(); return; }
    }
    var last = chart[chart.length - 1];
    if (b.t < last.t) return;
    for (var t = last.t + 1; t < b.t && t - last.t <= 60; t++) chart.push({ t: t, enqueued: 0, done: 0, failed: 0 });
    chart.push(b);
    while (chart.length > 60) chart.shift();
    draw();
  }

  function fmtDur(ms) {
    if (ms <= 0) return "–";
    if (ms < 1000) return ms + "ms";
    var s = ms / 1000;
    if (s < 60) return s.toFixed(1) + "s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    var h = Math.floor(m / 60);
    if (h < 48) return h + "h" + String(m % 60).padStart(2, "0") + "m";
    return Math.floor(h / 24) + "d";
  }

  function set(node, text) {
    if (node && node.textContent !== text) {
      node.textContent = text;
      node.classList.remove("flashy"); void node.offsetWidth; node.classList.add("flashy");
    }
  }

  function badge(paused) {
    var s = document.createElement("span");
    s.className = "badge " + (paused ? "paused" : "ok");
    s.textContent = paused ? "paused" : "running";
    return s;
  }

  function queues(list) {
    var tbody = document.querySelector("#queues tbody");
    var totals = { waiting: 0, behind: 0, scheduled: 0, active: 0, dead: 0 };
    list.forEach(function (q) {
      totals.waiting += q.waiting; totals.behind += q.behind; totals.scheduled += q.scheduled; totals.active += q.active; totals.dead += q.dead;
      if (tbody) {
        var row = null;
        tbody.querySelectorAll("tr[data-queue]").forEach(function (r) { if (r.dataset.queue === q.name) row = r; });
        if (!row) {
          var empty = tbody.querySelector("tr.empty");
          if (empty) empty.remove();
          row = document.createElement("tr");
          row.dataset.queue = q.name;
          var a = document.createElement("a");
          a.href = base + "/queue?name=" + encodeURIComponent(q.name);
          a.textContent = q.name;
          var td = document.createElement("td"); td.appendChild(a); row.appendChild(td);
          ["waiting", "behind", "scheduled", "active", "oldest_active", "dead", "latency"].forEach(function (k) {
            var c = document.createElement("td"); c.className = "n"; c.dataset.k = k; row.appendChild(c);
          });
          var p = document.createElement("td"); p.dataset.k = "paused"; row.appendChild(p);
          tbody.appendChild(row);
        }
        ["waiting", "behind", "scheduled", "active", "dead"].forEach(function (k) { set(row.querySelector('[data-k="' + k + '"]'), String(q[k])); });
        set(row.querySelector('[data-k="oldest_active"]'), fmtDur(q.oldest_active_ms));
        set(row.querySelector('[data-k="latency"]'), fmtDur(q.latency_ms));
        var pc = row.querySelector('[data-k="paused"]');
        var want = q.paused ? "paused" : "running";
        if (pc.textContent !== want) { pc.textContent = ""; pc.appendChild(badge(q.paused)); }
      }
      var map = { queued: q.waiting, scheduled: q.scheduled, active: q.active, dead: q.dead };
      document.querySelectorAll(".count[data-q]").forEach(function (c) {
        if (c.dataset.q === q.name && map[c.dataset.k] !== undefined) set(c, String(map[c.dataset.k]));
      });
    });
    ["waiting", "behind", "scheduled", "active", "dead"].forEach(function (k) {
      var t = document.getElementById("t-" + k);
      if (t) set(t, totals[k].toLocaleString("en-US"));
    });
  }

  // The live indicator: green while the stream delivers and the server
  // reads Redis, red while Redis does not answer (the counts shown are as
  // of then), grey while the stream is down or silent (the server sends
  // Redis's status every second).
  var live = document.getElementById("live");
  var liveText = live && live.querySelector("span");
  var heard = 0, liveState = "";
  function setLive(state, text, title) {
    if (!live) return;
    liveState = state;
    live.className = "live " + state;
    live.dataset.state = state;
    live.title = title;
    if (liveText) liveText.textContent = " " + text;
  }
  function clock(ms) { return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }); }

  var es = null;
  function connect() {
    es = new EventSource(base + "/events");
    es.onopen = function () { heard = Date.now(); };
    es.onerror = function () {
      setLive("off", "offline", "the live stream from the dashboard is down: reconnecting");
      if (es.readyState === 2) { // CLOSED: the browser gave up (a non-200 answer): try again
        es.close();
        setTimeout(connect, 3000);
      }
    };
    es.addEventListener("status", function (e) {
      heard = Date.now();
      var s = JSON.parse(e.data);
      if (s.redis) setLive("on", "live", "live updates");
      else setLive("down", "Redis down", "the dashboard cannot reach Redis" + (s.since ? " since " + clock(s.since) : "") + ": the counts shown are from before");
    });
    es.addEventListener("queues", function (e) { heard = Date.now(); queues(JSON.parse(e.data)); });
    es.addEventListener("minute", function (e) { minute(JSON.parse(e.data)); });
  }
  if (window.EventSource && live) {
    setLive("off", "connecting", "connecting to the live stream");
    connect();
    setInterval(function () {
      if ((liveState === "on" || liveState === "down") && Date.now() - heard > 5000) {
        setLive("off", "stalled", "no word from the dashboard for " + Math.round((Date.now() - heard) / 1000) + "s");
      }
    }, 1000);
    window.addEventListener("pagehide", function () { if (es) es.close(); });
  }
})();
