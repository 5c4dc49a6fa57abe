"""`make run`'s demo end to end: queue over HTTP, watch it reach the catch-all SMTP server."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from .smtpd import free_port


def _call(url: str, token: str, data: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    body = urllib.parse.urlencode(data).encode() if data else None
    request = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_demo_sends_a_queued_message_to_its_catch_all_server(tmp_path):
    port, smtp_port = free_port(), free_port()
    env = dict(os.environ, OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_POLL_INTERVAL="0.5",
               PYTHONUNBUFFERED="1")  # fmt: skip
    env.pop("OUTBOX_DATABASE_URL", None)
    demo = subprocess.Popen(
        [sys.executable, "-m", "outbox", "demo", "--port", str(port),
         "--smtp-port", str(smtp_port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        token = None
        for line in demo.stdout:
            if "API token" in line:
                token = line.split()[-1]
            if "/api/messages" in line:
                break
        assert token and token.startswith("obx_")
        base = f"http://127.0.0.1:{port}/api/messages"
        for _ in range(100):  # the server starts listening just after printing
            try:
                queued = _call(
                    base, token, {"to": "ann@example.com", "text": "hi", "subject": "Demo"}
                )
                break
            except OSError:
                time.sleep(0.1)
        assert queued["status"] == "queued"
        deadline = time.monotonic() + 20
        while _call(f"{base}/{queued['id']}", token)["status"] != "sent":
            assert time.monotonic() < deadline, "the demo worker did not send the message"
            time.sleep(0.2)
        kept = list((tmp_path / "mail").glob("*.eml"))
        assert len(kept) == 1
        assert queued["message_id"] in kept[0].read_text()
        assert (tmp_path / "outbox.sqlite3").exists()
    finally:
        demo.send_signal(signal.SIGINT)
        demo.communicate(timeout=20)
