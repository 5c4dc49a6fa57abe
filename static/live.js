// The compose form's time zone and the dashboard's pause while hidden (CSP: no inline scripts).
(function () {
  "use strict";

  // Compose: send-after is typed in the browser's zone; the server converts it to UTC.
  var zone = "UTC";
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  } catch (e) {
    // no Intl: the form says UTC, and UTC it is
  }
  document.querySelectorAll("input[name=zone]").forEach(function (input) {
    input.value = zone;
  });
  document.querySelectorAll("[data-zone-name]").forEach(function (name) {
    name.textContent = zone;
  });

  // Dashboard: polls of [data-live] elements are dropped while the tab is hidden; when
  // it shows again they ask at once (their hx-trigger lists outbox:visible).
  // A refresh asked before an action inside it (a Resend) has been answered read the old
  // state: its answer is not swapped in, or it would undo what the action's answer shows.
  var acting = 0; // actions inside a live part on their way
  var actedAt = 0; // when the last of them was answered

  function sourceOf(event) {
    return (event.detail && event.detail.elt) || event.target;
  }
  function isLive(source) {
    return source instanceof Element && source.hasAttribute("data-live");
  }
  function isInsideLive(source) {
    return source instanceof Element && !isLive(source) && source.closest("[data-live]") !== null;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var source = sourceOf(event);
    if (isLive(source)) {
      if (document.hidden) {
        event.preventDefault();
      } else if (event.detail.xhr) {
        event.detail.xhr.outboxAskedAt = Date.now();
      }
    } else if (isInsideLive(source)) {
      acting += 1;
      if (event.detail.xhr) {
        event.detail.xhr.outboxActing = true;
      }
    }
  });
  // Counted by its request, not by where its element is now: an answer swapped into the
  // whole live part (pause, resume) takes its button out of the page before this event,
  // which htmx then fires again on the live part itself.
  document.addEventListener("htmx:afterRequest", function (event) {
    var xhr = event.detail.xhr;
    if (xhr && xhr.outboxActing) {
      xhr.outboxActing = false;
      acting = Math.max(acting - 1, 0);
      actedAt = Date.now();
    }
  });
  // An action's own answer is swapped in: htmx fires this event on its target (the live
  // part itself, for pause and resume), so the request tells an answer from a refresh.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var xhr = event.detail.xhr;
    if (xhr && xhr.outboxActing) {
      return;
    }
    if (isLive(sourceOf(event)) && (acting > 0 || (xhr && xhr.outboxAskedAt <= actedAt))) {
      event.detail.shouldSwap = false;
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.hidden || !window.htmx) {
      return;
    }
    document.querySelectorAll("[data-live]").forEach(function (live) {
      window.htmx.trigger(live, "outbox:visible");
    });
  });
})();
