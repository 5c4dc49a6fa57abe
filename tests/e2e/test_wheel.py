"""The wheel: built from this checkout, installed in a clean virtualenv, run from elsewhere.

A wheel once left out templates/, static/ and the migrations' alembic.ini: `outbox db
upgrade` failed, the sign-in page answered 500, the stylesheet 404 and the instance
folder was made in site-packages. Here the wheel is installed as the docs' "Running
it for real" says, with its dependencies and nothing of the checkout, and used from an
empty working directory: the schema, the pages with their stylesheet and htmx, the API,
and mail sent over SMTP to a real server on loopback by `outbox send-queued` and by
`outbox worker`.
"""

import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
from packaging.version import Version

from outbox import app as outbox_app
from tests.support import processes
from tests.support.pages import Element, parse
from tests.support.smtpd import SmtpServer, free_port

ROOT = Path(__file__).resolve().parents[2]
# Each folder of the checkout, and where its files are in the wheel.
SHIPPED = {"outbox": "outbox", "templates": "outbox/templates", "static": "outbox/static"}
# What the build must not copy from a working checkout.
NOT_SOURCE = shutil.ignore_patterns(
    ".venv*", "venv", ".git", "instance", "tests", "bench", "build", "dist", "*.egg-info",
    "__pycache__", ".*cache", ".hypothesis", "node_modules",
)  # fmt: skip
PASSWORD = "correct horse battery"


def run(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command to its end; fail the test with its output if it fails."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of the checkout, with this venv's setuptools."""
    setuptools = Version(importlib.metadata.version("setuptools"))
    if setuptools < Version("70.1"):
        pytest.fail(f"setuptools {setuptools} cannot build the wheel: pip install -e '.[dev]'")
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # setuptools writes build/ and egg-info into the source
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--wheel-dir", str(work), str(source)])  # fmt: skip
    (built,) = work.glob("outbox-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv of its own (no system site-packages) with the wheel and its dependencies.

    The dependencies come from the package index at the versions this test run has, so
    the wheel is tried with what the rest of the suite tried.
    """
    home = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(home)])
    pins: dict[str, str] = {}
    for dist in importlib.metadata.distributions():  # in sys.path order: the first counts
        name = dist.metadata["Name"]
        if name and name.lower() != "outbox":
            pins.setdefault(name.lower(), f"{name}=={dist.version}")
    constraints = home.parent / "constraints.txt"
    constraints.write_text("\n".join(pins.values()) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(home / "bin" / "python"), "install",
         "--quiet", "--no-compile", "--constraint", str(constraints), str(wheel)])  # fmt: skip
    return home


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would lead Python or outbox to the checkout.

    Bytecode may be written: the venv was installed without it (pip's compiling of every
    module takes longer than the commands here compiling what they import, once).
    """
    dropped = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV"}
    dropped.add("PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items()
           if k not in dropped and not k.startswith(("OUTBOX_", "FLASK_"))}  # fmt: skip
    env.update(extra)
    return env


class Browser:
    """HTTP with a cookie jar, as a person's browser signs in and reads the pages."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))

    def open(self, path: str, data: bytes | None = None, headers: dict[str, str] | None = None
             ) -> tuple[int, str, str, bytes]:  # fmt: skip
        """Status, final path, content type and body; redirects are followed."""
        request = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(request, timeout=30) as answer:
                final = urllib.parse.urlsplit(answer.url).path
                return answer.status, final, answer.headers["Content-Type"], answer.read()
        except urllib.error.HTTPError as error:
            return error.code, path, error.headers["Content-Type"], error.read()


@contextlib.contextmanager
def gunicorn(venv: Path, cwd: Path, log: Path) -> Iterator[Browser]:
    """The installed app under the installed gunicorn; a browser once it answers."""
    port = free_port()
    command = [str(venv / "bin" / "gunicorn"), "-w", "1", "-b", f"127.0.0.1:{port}",
               "outbox:create_app()"]  # fmt: skip
    with open(log, "wb") as out:
        server = subprocess.Popen(command, cwd=cwd, env=clean_env(), stdout=out,
                                  stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + processes.START_TIMEOUT
        while not _answers(port):
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield Browser(port)
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0, log.read_text()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_the_wheel_carries_every_file_of_the_package_templates_and_static(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"{target}/{path.relative_to(ROOT / folder).as_posix()}"
        for folder, target in SHIPPED.items()
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    read = {"outbox/migrations/alembic.ini", "outbox/migrations/script.py.mako",
            "outbox/templates/auth/sign_in.html", "outbox/static/htmx.min.js"}  # fmt: skip
    assert read <= expected
    assert sorted(expected - names) == []
    others = {n for n in names - expected if not n.startswith("outbox-0.1.0.dist-info/")}
    assert sorted(others) == []  # no tests, instance or checkout files


def test_the_installed_wheel_runs_from_an_empty_directory(
    venv: Path, tmp_path: Path, smtp: SmtpServer
) -> None:
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    instance = venv / "var" / "outbox-instance"  # Flask's place for an installed package
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()

    def command(*args: str) -> str:
        return run([str(venv / "bin" / "outbox"), *args], cwd=cwd, env=clean_env()).stdout

    command("db", "upgrade")  # the embedded default: SQLite in the instance folder
    assert (instance / "outbox.sqlite3").is_file() and (instance / "secret_key").is_file()
    assert not (site / "instance").exists() and not (site / "outbox" / "instance").exists()
    assert list(cwd.iterdir()) == []
    where = run([str(venv / "bin" / "python"), "-c",
                 "import outbox; print(outbox.__file__); print(outbox.create_app().instance_path)"],
                cwd=cwd, env=clean_env()).stdout.split()  # fmt: skip
    assert where == [str(site / "outbox" / "__init__.py"), str(instance)]

    # config.py is read from the instance folder too: it points outbox at the SMTP server.
    settings = f"MAIL_PORT = {smtp.port}\nMAIL_DEFAULT_SENDER = 'outbox@example.com'\n"
    (instance / "config.py").write_text(settings)
    command("create-user", "staff@example.com", "--password", PASSWORD)
    token = command("create-token", "shop").splitlines()[-1]

    with gunicorn(venv, cwd, tmp_path / "gunicorn.log") as browser:
        sign_in(browser, check_sign_in_page(browser))
        first = enqueue(browser, token, "Sent by send-queued")
        assert "sent 1, deferred 0, failed 0" in command("send-queued")
        second = enqueue(browser, token, "Sent by the worker")
        run_worker(venv, cwd, tmp_path / "worker.log", until=lambda: len(smtp.received) == 2)
        for path, text in [("/messages", b"Sent by the worker"),
                           (f"/messages/{first}", b"Sent by send-queued"),
                           (f"/messages/{second}", b"Sent by the worker")]:  # fmt: skip
            status, _, _, body = browser.open(path)
            assert status == 200 and text in body, (path, body[-2000:])

    assert [r.rcpt_tos for r in smtp.received] == [["ann@example.com"]] * 2
    assert b"Subject: Sent by send-queued" in smtp.received[0].content


def check_sign_in_page(browser: Browser) -> Element:
    """The sign-in page, and its stylesheet and htmx as the checkout has them."""
    status, _, kind, body = browser.open("/sign-in")
    assert (status, kind) == (200, "text/html; charset=utf-8"), body[-2000:]
    page = parse(body.decode())
    assets = [("link", "href", "outbox.css", "text/css"),
              ("script", "src", "htmx.min.js", "text/javascript")]  # fmt: skip
    for tag, attribute, name, expected in assets:
        (url,) = [e[attribute] for e in page.find_all(tag) if name in e.get(attribute, "")]
        status, _, kind, served = browser.open(url)
        assert (status, kind.split(";")[0]) == (200, expected), url
        assert served == (ROOT / "static" / name).read_bytes()
    return page


def sign_in(browser: Browser, page: Element) -> None:
    """Sign the staff account in through the page's form; the dashboard follows."""
    (csrf,) = {e["value"] for e in page.find_all("input", name="csrf_token")}
    form = {"csrf_token": csrf, "email": "staff@example.com", "password": PASSWORD}
    status, final, _, body = browser.open("/sign-in", urllib.parse.urlencode(form).encode())
    assert (status, final) == (200, "/"), body[-2000:]


def enqueue(browser: Browser, token: str, subject: str) -> int:
    """Queue a mail through the API; its id."""
    mail = {"to": ["ann@example.com"], "subject": subject, "text": "Installed."}
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    status, _, _, body = browser.open("/api/messages", json.dumps(mail).encode(), headers)
    assert status == 201, body
    return int(json.loads(body)["id"])


def run_worker(venv: Path, cwd: Path, log: Path, until: Callable[[], bool]) -> None:
    """Run the installed `outbox worker` until the condition holds; it stops cleanly."""
    with open(log, "wb") as out:
        command = [str(venv / "bin" / "outbox"), "worker"]
        process = subprocess.Popen(command, cwd=cwd, env=clean_env(), stdout=out,
                                   stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + processes.START_TIMEOUT
        while not until():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()


def test_a_checkout_finds_its_files_and_instance_beside_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Run from this checkout (editable or on PYTHONPATH): ./templates, ./static, ./instance."""
    assert not outbox_app.FROM_WHEEL and outbox_app.FILES == ROOT
    monkeypatch.delenv("OUTBOX_INSTANCE_PATH", raising=False)
    assert outbox_app.instance_folder() == str(ROOT / "instance")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", "somewhere")  # taken from where it is run
    assert outbox_app.instance_folder() == str(tmp_path / "somewhere")
