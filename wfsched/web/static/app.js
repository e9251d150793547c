// wfsched web view: countdowns to the next due instant, counted every second.
// The page itself is refreshed in place by htmx (hx-trigger on #content);
// without JavaScript the server-rendered countdown and a meta refresh remain.
(function () {
  "use strict";
  function two(n) { return (n < 10 ? "0" : "") + n; }
  function span(seconds) {
    var whole = Math.floor(seconds);
    var h = Math.floor(whole / 3600), m = Math.floor((whole % 3600) / 60), s = whole % 60;
    if (h) return h + " h " + two(m) + " min " + two(s) + " s";
    return m ? m + " min " + two(s) + " s" : s + " s";
  }
  function tick() {
    var now = Date.now() / 1000;
    var items = document.querySelectorAll("[data-epoch]");
    for (var i = 0; i < items.length; i++) {
      var left = parseFloat(items[i].getAttribute("data-epoch")) - now;
      items[i].textContent = left <= 0 ? "due now" : "in " + span(left);
    }
  }
  tick();
  setInterval(tick, 1000);
  document.addEventListener("htmx:afterSwap", tick);
})();
