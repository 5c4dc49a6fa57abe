// The compose form's time zone, the dashboard's server-sent events and its pause while
// hidden (CSP: no inline scripts).
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

  // Dashboard: where EventSource works, the live part comes from the server's events
  // (htmx's sse extension, static/sse.min.js) and the polls are held while they come.
  // The server ends each connection after a while with an "end" event; the page then
  // connects again at once. Until it has, or if the events never get through, the polls
  // go on. A hidden tab holds no connection (nor a server's thread): it closes, and
  // opens again when the tab is shown.
  if (window.EventSource) {
    document.querySelectorAll("[data-live][data-events]").forEach(function (live) {
      live.setAttribute("sse-connect", live.getAttribute("data-events"));
      live.setAttribute("sse-swap", "live");
      live.setAttribute("sse-close", "end");
    });
  }
  function connected(live) {
    return live instanceof Element && live.hasAttribute("data-streaming");
  }
  function stopEvents(live) {
    if (live.outboxSource) {
      live.outboxSource.close();
      live.outboxSource = null;
    }
    live.removeAttribute("data-streaming");
  }
  // A changed attribute makes htmx set the element up again, and the extension with it
  // opens a new connection, whose first event is read now.
  function startEvents(live) {
    if (!window.htmx || !live.hasAttribute("sse-connect") || document.hidden) {
      return;
    }
    stopEvents(live);
    live.setAttribute("data-connection", String(Number(live.getAttribute("data-connection") || 0) + 1));
    window.htmx.process(live);
  }
  function eachWithEvents(action) {
    document.querySelectorAll("[data-live][sse-connect]").forEach(action);
  }
  document.addEventListener("htmx:sseOpen", function (event) {
    if (isLive(event.target)) {
      event.target.outboxSource = event.detail.source;
      event.target.setAttribute("data-streaming", "");
    }
  });
  document.addEventListener("htmx:sseError", function (event) {
    if (isLive(event.target)) {
      event.target.removeAttribute("data-streaming"); // polled until it is back
    }
  });
  document.addEventListener("htmx:sseClose", function (event) {
    if (isLive(event.target) && event.detail.type === "message") {
      event.target.outboxSource = null; // the extension closes it
      startEvents(event.target);
    }
  });

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
      if (document.hidden || connected(source)) {
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
      // An event already on its way read the state before the action: a new connection
      // drops it and brings the state after.
      if (acting === 0) {
        eachWithEvents(startEvents);
      }
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
  // Nor is a pushed live part while an action inside it is on its way.
  document.addEventListener("htmx:sseBeforeMessage", function (event) {
    if (isLive(event.target) && acting > 0) {
      event.preventDefault();
    }
  });
  // What a reader opened (a chart's figures) stays open when the live part comes again.
  // The state is read off the page right before each swap as well as at each toggle: the
  // toggle event comes a task after the click, and a push swapped in between takes the
  // element out of the page first, so its toggle never reaches the document.
  var opened = {};
  function remember(details) {
    opened[details.getAttribute("data-keep-open")] = details.open;
  }
  document.addEventListener("toggle", function (event) {
    var details = event.target;
    if (details instanceof Element && details.hasAttribute("data-keep-open")) {
      remember(details);
    }
  }, true);
  function rememberAll() {
    document.querySelectorAll("details[data-keep-open]").forEach(remember);
  }
  document.addEventListener("htmx:sseBeforeMessage", rememberAll);
  document.addEventListener("htmx:beforeSwap", rememberAll);
  function reopen() {
    document.querySelectorAll("details[data-keep-open]").forEach(function (details) {
      if (opened[details.getAttribute("data-keep-open")] && !details.open) {
        details.open = true;
      }
    });
  }
  document.addEventListener("htmx:sseMessage", reopen);
  document.addEventListener("htmx:afterSwap", reopen);

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      eachWithEvents(stopEvents);
      return;
    }
    if (!window.htmx) {
      return;
    }
    eachWithEvents(startEvents);
    document.querySelectorAll("[data-live]").forEach(function (live) {
      window.htmx.trigger(live, "outbox:visible");
    });
  });
})();
