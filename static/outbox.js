// outbox's own script (htmx runs with allowEval off: no inline handlers, no hx-on).
// The pages work without it; it shows each action's answer in the notice region, adds
// "choose every row" and keeps a choice of rows from being wiped by the list's refresh.
(function () {
  "use strict";

  // Every action's answer, success or refusal, in the layout's #notice (role="status").
  // The server names it in an HX-Trigger header (outbox.web.notice), which htmx turns into
  // an outbox:notice event before it decides whether to swap: an error answer is not
  // swapped in, and the notice says why.
  function dismissible(notice) {
    if (notice.querySelector("button.dismiss")) { return; }
    var close = document.createElement("button");
    close.type = "button";
    close.className = "dismiss";
    close.setAttribute("aria-label", "Dismiss");
    close.textContent = "\u00d7";
    notice.appendChild(close);
  }

  function say(text, refused) {
    var region = document.getElementById("notice");
    if (!region) { return; }
    var notice = document.createElement("p");
    notice.className = "banner " + (refused ? "refused" : "notice");
    notice.textContent = text;
    dismissible(notice);
    region.replaceChildren(notice);
  }

  document.addEventListener("outbox:notice", function (event) {
    say(String(event.detail.text || ""), Boolean(event.detail.refused));
  });
  // An error answer without a notice of its own (a proxy's, say) still says something.
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    if (xhr && !xhr.getResponseHeader("HX-Trigger")) {
      say("The server answered " + xhr.status + ": nothing was changed here. Reload the page and try again.", true);
    }
  });
  document.addEventListener("htmx:sendError", function () {
    say("The server could not be reached: reload the page to see what happened.", true);
  });
  document.addEventListener("click", function (event) {
    var close = event.target.closest && event.target.closest("#notice button.dismiss");
    if (close) { close.parentElement.remove(); }
  });

  function showPickAll(root) {
    root.querySelectorAll(".pick-all").forEach(function (box) { box.hidden = false; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    showPickAll(document);
    document.querySelectorAll("#notice .banner").forEach(dismissible);
  });
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
