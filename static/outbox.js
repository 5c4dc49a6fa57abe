// outbox's own script (htmx runs with allowEval off: no inline handlers, no hx-on).
// The pages work without it; it adds "choose every row" and keeps a choice of rows
// from being wiped by the list's refresh.
(function () {
  "use strict";

  function showPickAll(root) {
    root.querySelectorAll(".pick-all").forEach(function (box) { box.hidden = false; });
  }

  document.addEventListener("DOMContentLoaded", function () { showPickAll(document); });
  document.addEventListener("htmx:afterSwap", function () { showPickAll(document); });

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.classList || !box.classList.contains("pick-all")) { return; }
    var form = box.closest("form");
    form.querySelectorAll('input[name="ids"]').forEach(function (row) { row.checked = box.checked; });
  });

  // The list refreshes itself while messages are in flight; not while rows are ticked.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var source = event.detail.elt;
    if (source.id === "listing" && source.querySelector('input[name="ids"]:checked')) {
      event.preventDefault();
    }
  });
})();
