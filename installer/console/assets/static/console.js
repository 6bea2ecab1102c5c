// The console's only script: every few seconds (main's data-interval, in
// milliseconds) it reads the page's live part again (main's data-live URL)
// and puts it in place, until that part says it is final (an operation
// that ended); when the console cannot be reached it says so and keeps
// trying.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var lost = document.getElementById("lost");
  if (!main || !live || !main.dataset.live) {
    return;
  }
  var url = main.dataset.live;
  var every = parseInt(main.dataset.interval, 10) || 5000;
  function final() {
    return live.querySelector("[data-final]") !== null;
  }
  if (final()) {
    return;
  }
  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 401) {
          window.location.assign("/login");
          return null;
        }
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        lost.hidden = true;
        live.innerHTML = html;
        if (final()) {
          every = 0;
        }
      })
      .catch(function () {
        lost.hidden = false;
      })
      .finally(function () {
        if (every > 0) {
          window.setTimeout(refresh, every);
        }
      });
  }
  window.setTimeout(refresh, every);
})();
