"""Worker processes for the tests: the command, its environment, waiting on what they do."""

import os
import sys
import time

OUTBOX = [sys.executable, "-m", "outbox"]


def worker_env(app, smtp, tmp_path, **extra: object) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = dict(os.environ)
    env.update(
        OUTBOX_DATABASE_URL=app.config["DATABASE_URL"],
        OUTBOX_INSTANCE_PATH=str(tmp_path),
        OUTBOX_MAIL_PORT=str(smtp.port),
        OUTBOX_MAIL_DEFAULT_SENDER="outbox@example.com",
        OUTBOX_BATCH_SIZE="50",
        OUTBOX_SMTP_TIMEOUT="5",
    )
    env.update({f"OUTBOX_{k}": str(v) for k, v in extra.items()})
    return env


def wait_until(predicate, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)
