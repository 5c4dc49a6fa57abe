"""The deploy recipe in deploy/: systemd units, gunicorn's settings, the env template, nginx."""

import http.client
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outbox import config
from outbox.smtp import admission
from tests.support import processes
from tests.support.deploy import DEPLOY, unit
from tests.support.smtpd import free_port

ROOT = Path(__file__).resolve().parents[2]
UNITS = ["outbox-web.service", "outbox-worker.service", "outbox-web-granian.service",
         "outbox-smtpd.service"]  # fmt: skip
VENV = "/opt/outbox/venv"  # where the units and the docs install outbox
BIN = Path(sys.executable).parent  # this venv's gunicorn and outbox
# Read by outbox.app.instance_folder, not a setting of config.DEFAULTS.
OUTSIDE_DEFAULTS = {"INSTANCE_PATH"}
# What systemd's EnvironmentFile= and sh's `.` read alike: no quotes, spaces, $, `, \ or ~.
PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.,:/@%+=?&-]*")
ASSIGNMENT = re.compile(r"(#\s*)?([A-Z][A-Z0-9_]*)=(.*)")


def seconds(span: str) -> float:
    """A systemd time span such as 45s or 2min, in seconds."""
    number, suffix = re.fullmatch(r"(\d+)(s|min)?", span).groups()  # type: ignore[union-attr]
    return float(number) * (60 if suffix == "min" else 1)


def template(commented: bool = False) -> dict[str, str]:
    """deploy/outbox.env's KEY=value lines; with commented, the `# KEY=value` examples too."""
    found = {}
    for line in (DEPLOY / "outbox.env").read_text().splitlines():
        match = ASSIGNMENT.fullmatch(line)
        if match and (commented or not match[1]):
            found[match[2]] = match[3]
    return found


# --- systemd units ---


def venv_copies(tmp_path: Path) -> list[str]:
    """The units, copied with ExecStart's programs in this venv (verify checks they exist)."""
    copies = []
    for name in UNITS:
        text = (DEPLOY / name).read_text()
        assert f"ExecStart={VENV}/bin/" in text
        (tmp_path / name).write_text(text.replace(f"{VENV}/bin", str(BIN)))
        copies.append(str(tmp_path / name))
    return copies


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """No error and no warning (an unknown or misspelt key is only a warning)."""
    copies = venv_copies(tmp_path)
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", *copies],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_units_keep_their_hardening(tmp_path: Path) -> None:
    """systemd's own exposure score, 3.2 of 10 now: a dropped protection fails this."""
    copies = venv_copies(tmp_path)
    command = ["systemd-analyze", "security", "--offline=yes", "--threshold=35", "--no-pager"]
    done = subprocess.run([*command, *copies], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_units_run_outbox_as_its_user_with_the_env_file_and_hardening() -> None:
    instance = template()["OUTBOX_INSTANCE_PATH"]
    for name in UNITS:
        service = unit(name)["Service"]
        assert service["User"] == service["Group"] == "outbox", name
        assert service["EnvironmentFile"] == "/etc/outbox/outbox.env", name
        # The instance folder: made by systemd, the only writable place under strict.
        assert f"/var/lib/{service['StateDirectory']}" == instance, name
        assert service["WorkingDirectory"] == service["ReadWritePaths"] == instance, name
        assert service["ProtectSystem"] == "strict", name
        for key in ("NoNewPrivileges", "PrivateTmp", "ProtectHome", "PrivateDevices"):
            assert service[key] == "yes", (name, key)
        assert (service["Restart"], service["KillSignal"]) == ("on-failure", "SIGTERM"), name
        assert seconds(service["RestartSec"]) >= 1, name
        # SIGTERM to the main process, which stops its children; SIGKILL to all at the end.
        assert service["KillMode"] == "mixed", name
        assert "network-online.target" in unit(name)["Unit"]["After"], name
    web = unit("outbox-web.service")["Service"]
    assert web["ExecStart"] == (
        f"{VENV}/bin/gunicorn -c /etc/outbox/gunicorn.conf.py 'outbox:create_app()'"
    )
    assert web["ExecReload"] == "/bin/kill -s HUP $MAINPID"
    worker = unit("outbox-worker.service")["Service"]
    assert re.fullmatch(rf"{VENV}/bin/outbox worker --processes \d+", worker["ExecStart"])


def test_worker_stop_waits_out_an_smtp_server_that_stopped_answering() -> None:
    """The operation in hand and QUIT each up to SMTP_TIMEOUT, then the writes."""
    smtp_timeout = float(template().get("OUTBOX_SMTP_TIMEOUT", config.DEFAULTS["SMTP_TIMEOUT"]))
    stop = seconds(unit("outbox-worker.service")["Service"]["TimeoutStopSec"])
    assert stop >= 2 * smtp_timeout + 30


def test_smtpd_may_open_a_file_for_every_connection_it_lets_in() -> None:
    """systemd's default soft limit (1,024) is below the default cap and what it needs besides."""
    files = int(unit("outbox-smtpd.service")["Service"]["LimitNOFILE"])
    assert files >= config.DEFAULTS["SMTPD_MAX_CONNECTIONS"] + admission.RESERVED_FILES


def test_web_stop_outlasts_gunicorns_graceful_timeout() -> None:
    settings = runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))
    stop = seconds(unit("outbox-web.service")["Service"]["TimeoutStopSec"])
    assert stop >= settings["graceful_timeout"] + 10


# --- the env template ---


def test_env_template_names_only_outbox_settings_with_plain_values() -> None:
    lines = (DEPLOY / "outbox.env").read_text().splitlines()
    for line in lines:
        assert not line or line.startswith("#") or ASSIGNMENT.fullmatch(line), line
    for key, value in template(commented=True).items():
        assert key.startswith("OUTBOX_"), key
        name = key.removeprefix("OUTBOX_")
        assert name in config.DEFAULTS or name in OUTSIDE_DEFAULTS, f"unknown setting {key}"
        assert PLAIN_VALUE.fullmatch(value), (key, value)
    for key, value in template().items():
        if key.removeprefix("OUTBOX_") in config.DEFAULTS:
            config.coerce(key.removeprefix("OUTBOX_"), value)  # typed as the app types it


def test_env_template_keeps_safe_defaults_and_no_secrets() -> None:
    active = template()
    assert config.coerce("MAIL_TLS_VERIFY", active["OUTBOX_MAIL_TLS_VERIFY"]) is True
    assert config.coerce("TRUST_PROXY", active["OUTBOX_TRUST_PROXY"]) is True
    assert not config.coerce("MAIL_ALLOW_PLAINTEXT_AUTH",
                             active["OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH"])  # fmt: skip
    for secret in ("OUTBOX_SECRET_KEY", "OUTBOX_MAIL_PASSWORD"):
        assert not template(commented=True)[secret], secret
        assert secret not in active
    assert ":CHANGE-ME@" in active["OUTBOX_DATABASE_URL"]


def test_env_template_reads_the_same_in_sh() -> None:
    """The docs run `outbox db upgrade` with `set -a; . /etc/outbox/outbox.env`."""
    done = subprocess.run(["/bin/sh", "-c", 'set -a && . "$0" && env', DEPLOY / "outbox.env"],
                          capture_output=True, text=True, env={}, check=True)  # fmt: skip
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert {k: v for k, v in seen.items() if k.startswith("OUTBOX_")} == template()


def env_for(tmp_path: Path) -> dict[str, str]:
    """The template's settings, with the instance folder and a SQLite file of the test's."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **template()}
    env["OUTBOX_INSTANCE_PATH"] = str(tmp_path / "instance")
    env["OUTBOX_DATABASE_URL"] = f"sqlite:///{tmp_path / 'outbox.sqlite3'}"
    env["RUNTIME_DIRECTORY"] = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    return env


# --- gunicorn ---


def gunicorn(*args: str) -> list[str]:
    return [str(BIN / "gunicorn"), "-c", str(DEPLOY / "gunicorn.conf.py"), *args]


def test_gunicorn_config_loads_the_app_with_the_templates_settings(tmp_path: Path) -> None:
    command = gunicorn("--check-config", "outbox:create_app()")
    done = subprocess.run(command, cwd=tmp_path, env=env_for(tmp_path), capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_gunicorn_serves_the_pages_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    upgrade = f'set -a && . "$0" && set +a && exec {BIN}/outbox db upgrade'
    (tmp_path / "outbox.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    subprocess.run(["/bin/sh", "-c", upgrade, tmp_path / "outbox.env"], env={},
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)  # fmt: skip
    port = free_port()
    log = tmp_path / "gunicorn.log"
    with open(log, "wb") as out, processes.group(
        gunicorn("--bind", f"127.0.0.1:{port}", "outbox:create_app()"),
        cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
    ) as web:  # fmt: skip
        status = _get_when_up(port, "/sign-in", web, log)
        assert status == 200, log.read_text()
        web.send_signal(signal.SIGTERM)
        assert web.wait(timeout=40) == 0, log.read_text()
    text = log.read_text()
    # The access log names the client nginx saw; the control socket sat in /run/outbox.
    assert '203.0.113.9 "GET /sign-in HTTP/1.1" 200' in text, text
    assert "Failed to start control socket" not in text, text


def _get_when_up(port: int, path: str, web: subprocess.Popen, log: Path) -> int:  # type: ignore[type-arg]
    deadline = time.monotonic() + processes.START_TIMEOUT
    while time.monotonic() < deadline:
        assert web.poll() is None, log.read_text()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", path, headers={"X-Forwarded-For": "203.0.113.9"})
            response = conn.getresponse()
            response.read()
            return response.status
        except OSError:
            time.sleep(0.2)
        finally:
            conn.close()
    raise AssertionError(f"gunicorn did not answer: {log.read_text()}")


def test_child_exit_drops_a_dead_web_processes_live_gauges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("prometheus_client", reason="prometheus-client not installed")
    hooks = runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))
    live, counts = tmp_path / "gauge_livesum_4242.db", tmp_path / "counter_4242.db"
    live.write_bytes(b""), counts.write_bytes(b"")
    dead = type("Worker", (), {"pid": 4242})()
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    hooks["child_exit"](None, dead)
    assert live.exists()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    hooks["child_exit"](None, dead)
    assert not live.exists() and counts.exists()  # counters outlive their process


# --- nginx ---


def test_nginx_body_limit_is_outboxs_plus_multipart_overhead() -> None:
    size = re.search(r"client_max_body_size (\d+)m;", (DEPLOY / "nginx.conf").read_text())
    assert size, "client_max_body_size in MiB"
    limit = int(template()["OUTBOX_MAX_MESSAGE_BYTES"])
    assert limit == config.DEFAULTS["MAX_MESSAGE_BYTES"]
    assert limit < int(size[1]) * 2**20 <= limit + 2 * 2**20


@pytest.mark.skipif(not shutil.which("nginx"), reason="nginx not installed")
def test_nginx_example_passes_nginx_t(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    cert = trustme.CA().issue_cert("outbox.example.com")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    site = (DEPLOY / "nginx.conf").read_text()
    live = "/etc/letsencrypt/live/outbox.example.com/"
    assert live in site
    site = site.replace(f"{live}fullchain.pem", str(tmp_path / "cert.pem"))
    (tmp_path / "site.conf").write_text(
        site.replace(f"{live}privkey.pem", str(tmp_path / "key.pem"))
    )
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
        f"http {{\n    include {tmp_path}/site.conf;\n}}\n"
    )
    main = str(tmp_path / "nginx.conf")
    command = ["nginx", "-t", "-e", "stderr", "-p", str(tmp_path), "-c", main]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "[warn]" not in done.stderr, done.stderr
