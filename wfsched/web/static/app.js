// wfsched web view: countdowns to the next due instant, counted every second.
// The page itself is refreshed in place by htmx (hx-trigger on #content);
// without JavaScript the server-rendered countdown and a meta refresh remain.
(function () {
  "use strict";
  function span(seconds) {
    if (seconds < 60) return seconds.toFixed(0) + " s";
    if (seconds < 3600) {
      var s = Math.floor(seconds % 60);
      return Math.floor(seconds / 60) + " min " + (s < 10 ? "0" : "") + s + " s";
    }
    var m = Math.floor((seconds % 3600) / 60);
    return Math.floor(seconds / 3600) + " h " + (m < 10 ? "0" : "") + m + " min";
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
