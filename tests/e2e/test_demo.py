"""`make run`'s demo end to end: queue over HTTP, watch it reach the catch-all SMTP server."""

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.cookiejar import CookieJar
from pathlib import Path

from outbox.auth import accounts
from tests.support import processes
from tests.support.smtpd import free_port


def _call(url: str, token: str, data: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    body = urllib.parse.urlencode(data).encode() if data else None
    request = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


@dataclass
class Demo:
    process: subprocess.Popen  # type: ignore[type-arg]
    base: str
    token: str
    password: str
    stderr: Path


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, OUTBOX_INSTANCE_PATH=str(tmp_path), OUTBOX_POLL_INTERVAL="0.5",
               PYTHONUNBUFFERED="1")  # fmt: skip
    for name in ("OUTBOX_DATABASE_URL", "OUTBOX_DNS_RESOLVERS"):
        env.pop(name, None)
    return env


def _command(port: int, smtp_port: int, ignore_sigint: bool = False) -> list[str]:
    command = [sys.executable, "-m", "outbox", "demo", "--port", str(port),
               "--smtp-port", str(smtp_port)]  # fmt: skip
    if ignore_sigint:  # as `make run &` in a script starts it
        command = ["bash", "-c", "trap '' INT; exec \"$@\"", "bash", *command]
    return command


def start(tmp_path: Path, port: int, smtp_port: int, ignore_sigint: bool = False) -> Demo:
    """Start the demo and read what it prints, up to its curl line; its web server answers."""
    stderr = tmp_path / f"demo-{time.monotonic_ns()}.log"
    with stderr.open("w") as err:
        process = processes.start(_command(port, smtp_port, ignore_sigint), env=_env(tmp_path),
                                  stdout=subprocess.PIPE, stderr=err, text=True)  # fmt: skip
    token = password = ""
    assert process.stdout is not None
    for line in process.stdout:
        if "API token" in line:
            token = line.split()[-1]
        if "sign in as" in line:
            password = line.split()[-1]
        if "/api/messages" in line:
            break
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):  # the server starts listening just after printing
        try:
            urllib.request.urlopen(f"{base}/sign-in", timeout=5).close()
            break
        except OSError:
            time.sleep(0.1)
    return Demo(process, base, token, password, stderr)


def test_demo_sends_a_queued_message_to_its_catch_all_server_and_logs_one_line(tmp_path):
    port, smtp_port = free_port(), free_port()
    demo = start(tmp_path, port, smtp_port)
    try:
        assert demo.token.startswith("obx_")
        base = f"{demo.base}/api/messages"
        # The demo's own domain reaches its SMTP server; any other address is captured.
        queued = _call(base, demo.token, {"to": "ann@demo.example", "text": "hi",
                                          "subject": "Demo"})  # fmt: skip
        assert queued["status"] == "queued"
        deadline = time.monotonic() + processes.START_TIMEOUT
        while _call(f"{base}/{queued['id']}", demo.token)["status"] != "sent":
            assert time.monotonic() < deadline, "the demo worker did not send the message"
            time.sleep(0.2)
        kept = list((tmp_path / "mail").glob("*.eml"))
        assert len(kept) == 1
        assert queued["message_id"] in kept[0].read_text()
        assert (tmp_path / "outbox.sqlite3").exists()
        time.sleep(1.2)  # two more ticks of the worker, idle
    finally:
        assert processes.end(demo.process, signal.SIGINT) == 0
    # A line for the mail kept, one for the pass that sent it; none per tick, per SMTP
    # command or per request.
    lines = demo.stderr.read_text().splitlines()
    assert len(lines) == 2, lines
    assert "demo SMTP server kept mail for ann@demo.example" in lines[0]
    assert re.search(r"INFO \S+: sent 1, deferred 0, failed 0 in \d+\.\d s$", lines[1])


def test_the_demo_captures_mail_to_other_addresses_and_its_server_defers_fails_and_bounces(
    tmp_path,
):
    port, smtp_port = free_port(), free_port()
    demo = start(tmp_path, port, smtp_port)
    try:
        base = f"{demo.base}/api/messages"
        wanted = {"someone@example.com": "sent", "defer@demo.example": "deferred",
                  "fail@demo.example": "failed"}  # fmt: skip
        ids = {to: _call(base, demo.token, {"to": to, "text": "hi", "subject": to})["id"]
               for to in wanted}  # fmt: skip
        deadline = time.monotonic() + processes.START_TIMEOUT
        while {to: _call(f"{base}/{pk}", demo.token)["status"] for to, pk in ids.items()} != wanted:
            assert time.monotonic() < deadline, "the demo worker did not settle the messages"
            time.sleep(0.2)
        assert list((tmp_path / "mail").glob("*.eml")) == []  # the refused were not kept
        with sqlite3.connect(tmp_path / "outbox.sqlite3") as db:
            kept = db.execute("SELECT message_pk, recipients FROM captured").fetchall()
        assert kept == [(ids["someone@example.com"], '["someone@example.com"]')]
        # bounce@ is taken, then its server's bounce comes back to the bounce intake.
        pk = _call(base, demo.token, {"to": "bounce@demo.example", "text": "hi"})["id"]

        def bounced() -> list[str]:
            found = _call(f"{base}/{pk}", demo.token)
            return [found["status"], *(r["state"] for r in found["recipients"])]

        while bounced() != ["sent", "bounced"]:
            assert time.monotonic() < deadline + 30, f"no bounce came back: {bounced()}"
            time.sleep(0.2)
        assert len(list((tmp_path / "mail").glob("*.eml"))) == 1
        # The Domains page's report on the demo's own domain, from the demo's DNS server.
        report = _call(demo.base + "/api/domains", demo.token)
        (domain,) = [d for d in report["domains"] if d["domain"] == "demo.example"]
        verdicts = {check["name"]: check["verdict"] for check in domain["checks"]}
        # Published as they should be but DKIM: the demo has no key, and the page says how.
        assert verdicts == {"SPF": "ok", "DKIM": "warning", "DMARC": "ok", "MX": "ok"}, domain
    finally:
        assert processes.end(demo.process, signal.SIGINT) == 0


CSRF = r'name="csrf_token" type="hidden" value="([^"]+)"'


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None  # the 302 itself is the answer wanted


def sign_in(base: str, email: str, password: str) -> int:
    """The status of a real browser-like sign-in: the form's CSRF token, its cookie, a POST."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(CookieJar()), _NoRedirect()
    )
    with opener.open(f"{base}/sign-in", timeout=10) as page:
        (token,) = re.findall(
            r'name="csrf_token" type="hidden" value="([^"]+)"', page.read().decode()
        )
    form = urllib.parse.urlencode({"csrf_token": token, "email": email, "password": password})
    try:
        with opener.open(f"{base}/sign-in", data=form.encode(), timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        refused.close()
        return refused.code


def test_a_restart_prints_a_new_password_that_signs_in_even_after_a_lockout(tmp_path):
    port, smtp_port = free_port(), free_port()
    first = start(tmp_path, port, smtp_port, ignore_sigint=True)
    try:
        assert sign_in(first.base, "staff@demo.example", first.password) == 302
        for _ in range(accounts.FAILURE_LIMIT):
            assert sign_in(first.base, "staff@demo.example", "a guess at it") == 401
        assert sign_in(first.base, "staff@demo.example", first.password) == 429
    finally:
        # Started with SIGINT ignored, it still stops on it, and cleanly.
        assert processes.end(first.process, signal.SIGINT) == 0
    # The same ports again at once: the first run's connections in TIME_WAIT are no bar.
    second = start(tmp_path, port, smtp_port)
    try:
        assert second.password and second.password != first.password
        assert sign_in(second.base, "staff@demo.example", first.password) == 401
        assert sign_in(second.base, "staff@demo.example", second.password) == 302
    finally:
        assert processes.end(second.process, signal.SIGTERM) == 0


def _refused(tmp_path: Path, port: int, smtp_port: int) -> subprocess.CompletedProcess[str]:
    with processes.group(_command(port, smtp_port), env=_env(tmp_path), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True) as demo:  # fmt: skip
        out, err = demo.communicate(timeout=60)
    return subprocess.CompletedProcess(demo.args, demo.returncode, out, err)


def test_a_taken_port_stops_the_demo_before_it_prints_or_changes_anything(tmp_path):
    port, smtp_port = free_port(), free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        done = _refused(tmp_path, port, smtp_port)
    assert done.returncode == 1
    assert done.stdout == ""  # no password, no token
    assert "Traceback" not in done.stderr
    assert f"port {port} on 127.0.0.1, for the demo's web app, is taken" in done.stderr
    assert re.search(r"make run PORT=\d+, or outbox demo --port \d+", done.stderr)
    assert "SMTP" not in done.stderr
    assert not (tmp_path / "outbox.sqlite3").exists(), "the account was touched"


def test_a_taken_smtp_port_and_one_port_for_both_are_refused_by_name(tmp_path):
    port, smtp_port = free_port(), free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", smtp_port))
        squatter.listen()
        done = _refused(tmp_path, port, smtp_port)
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    assert f"port {smtp_port} on 127.0.0.1, for the demo's SMTP server, is taken" in done.stderr
    suggested = int(re.findall(r"make run SMTP_PORT=(\d+)", done.stderr)[0])
    assert suggested not in (port, smtp_port)
    same = _refused(tmp_path, port, port)
    assert same.returncode == 1 and "cannot share port" in same.stderr


def test_a_port_out_of_range_is_refused_by_name(tmp_path):
    done = _refused(tmp_path, 70000, free_port())
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    assert "port 70000 on 127.0.0.1, for the demo's web app, is not a port number" in done.stderr
    (suggested,) = re.findall(r"make run PORT=(\d+)", done.stderr)
    assert 1024 <= int(suggested) <= 65535
