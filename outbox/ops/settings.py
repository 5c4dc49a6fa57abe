"""The operating settings: the full counts the pages show, the dashboard's live events,
readiness, the metrics' token."""

from outbox.core.config_schema import BOOL, INT, NUMBER, TEXT, Group, Setting

# fmt: off
GROUP = Group(
    "Metrics and health",
    "What the probes, the metrics and the pages' counts answer (see Metrics and health).",
    (
        # The pages count each status live up to 1,000; past that they show the full
        # count a worker made at most this long ago.
        Setting("COUNT_INTERVAL", NUMBER, 60.0, unit="seconds",
                description="seconds between full counts of the messages per status, shown by the "
                "pages past 1,000; each worker offers to count this often (give or take a "
                "quarter) and the first whose turn comes does"),
        Setting("LIVE_PUSH_INTERVAL", NUMBER, 5.0, unit="seconds",
                description="how often the dashboard's live events (`/live/events`) look "
                "for a change to push; the page polls every 5 seconds instead where "
                "server-sent events do not get through"),
        Setting("LIVE_STREAM_SECONDS", NUMBER, 30.0, unit="seconds",
                description="how long one connection to `/live/events` lasts before the "
                "server ends it and the browser connects again; keep it below the WSGI "
                "server's request timeout (gunicorn's `timeout`), as it holds a sync worker"),
        Setting("LIVE_STREAMS", INT, 2, unit="connections",
                description="how many `/live/events` connections one web process keeps open at "
                "once, each holding one of its threads; a dashboard past them is told `503` and "
                "polls every 5 seconds instead, so open dashboards never take every thread "
                "from the API. 0 serves no events: every dashboard polls"),
        Setting("READY_NEEDS_WORKER", BOOL, False,
                description="`/readyz` answers `503` unless a worker beat within two "
                "`POLL_INTERVAL`s"),
        Setting("METRICS_TOKEN", TEXT, None,
                description="the bearer token `/metrics` asks for; unset, `/metrics` answers "
                "`404`. `PROMETHEUS_MULTIPROC_DIR` (no `OUTBOX_` prefix: prometheus-client's own) "
                "makes it add up every process's counts (see Metrics and health)"),
    ),
)
# fmt: on
