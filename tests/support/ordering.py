"""The order test files start in: the longest first, so that none runs alone at the end.

`make test` hands pytest-xdist a test file at a time (--dist loadfile) and keeps the
collection's order of files (--no-loadscope-reorder). A file of a minute that starts
last, while the other process has nothing left to do, makes the whole run a minute
longer; started first, it runs beside the short files. LONGEST holds the files that
took longest in a measured run (or start the most: a browser, a wheel, npm), longest
first. Every other file follows by layer, the slow layers first, and within a layer
those with more tests first (xdist's own order). A file missing from LONGEST only
starts later than it might.
"""

import pytest

LONGEST = [
    "tests/e2e/test_throttle_processes.py",
    "tests/e2e/test_servers.py",
    "tests/e2e/test_browser_pause.py",
    "tests/http/test_fuzz.py",
    "tests/e2e/test_browser_live.py",
    "tests/e2e/test_accessibility.py",
    "tests/e2e/test_smtpd_envelope.py",
    "tests/soak/test_soak_drain.py",
    "tests/e2e/test_concurrency.py",
    "tests/e2e/test_mailings.py",
    "tests/e2e/test_browser_pages.py",
    "tests/e2e/test_webhook_worker.py",
    "tests/http/test_web_pages.py",
    "tests/e2e/test_bounce_inbound.py",
    "tests/e2e/test_browser.py",
    "tests/e2e/test_smtpd_delivery.py",
    "tests/e2e/test_smtpd_once.py",
    "tests/e2e/test_db_restart.py",
    "tests/e2e/test_wire_roundtrip.py",
    "tests/e2e/test_pickup.py",
    "tests/soak/test_soak_smtp.py",
    "tests/e2e/test_wheel.py",
    "tests/e2e/test_retention.py",
    "tests/e2e/test_reports.py",
    "tests/e2e/test_smtp_limits.py",
    "tests/e2e/test_generated_clients.py",
    "tests/e2e/test_logs.py",
    "tests/e2e/test_client.py",
    "tests/e2e/test_demo.py",
    "tests/e2e/test_bounce_imap.py",
    "tests/db/test_worker.py",
    "tests/db/test_submission_store.py",
    "tests/e2e/test_browser_suppression.py",
    "tests/e2e/test_mailing_budget.py",
    "tests/e2e/test_client_retry.py",
    "tests/e2e/test_metrics.py",
    "tests/db/test_lanes.py",
    "tests/e2e/test_smtpd_streams.py",
    "tests/e2e/test_hosts.py",
    "tests/http/test_web_auth.py",
    "tests/e2e/test_webhook_deadline.py",
    "tests/e2e/test_dkim.py",
    "tests/db/test_webhooks.py",
]
LAYERS = ["tests/soak/", "tests/e2e/", "tests/db/", "tests/http/", "tests/unit/"]


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _layer(path: str) -> int:
    return next((n for n, layer in enumerate(LAYERS) if path.startswith(layer)), len(LAYERS))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Sort the items file by file: LONGEST in its order, then by layer and number of tests."""
    rank = {path: n for n, path in enumerate(LONGEST)}
    counts: dict[str, int] = {}
    for item in items:
        counts[_file(item)] = counts.get(_file(item), 0) + 1

    def key(item: pytest.Item) -> tuple[int, int, int]:
        path = _file(item)
        return rank.get(path, len(rank)), _layer(path), -counts[path]

    # Stable: the tests of a file keep their order, and files of equal weight theirs.
    items.sort(key=key)
