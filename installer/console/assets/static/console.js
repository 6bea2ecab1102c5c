// The console's only script: every few seconds it reads the page's live
// part again (main's data-live URL) and puts it in place; when the console
// cannot be reached it says so and keeps trying.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var lost = document.getElementById("lost");
  if (!main || !live || !main.dataset.live) {
    return;
  }
  var url = main.dataset.live;
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
      })
      .catch(function () {
        lost.hidden = false;
      })
      .finally(function () {
        window.setTimeout(refresh, 5000);
      });
  }
  window.setTimeout(refresh, 5000);
})();
