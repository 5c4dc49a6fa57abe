"""`outbox routes` (the SMTP routes), `outbox urls` (Flask's URL map) and `outbox --version`."""

from click.testing import CliRunner

from outbox import create_app
from outbox.__main__ import main
from tests.support.app import base_config

ROUTES = """
[[routes]]
name = "relay"
host = "smtp.example.com"
port = 587
tls = "starttls"
username = "outbox"
password = "s3cret"
max_connections = 8
rate = 100

[[routes]]
name = "bulk"
host = "bulk.example.com"
port = 465
tls = "ssl"
tls_verify = false
streams = ["broadcast"]

[[routes]]
name = "backup"
host = "backup.example.com"
port = 25
tls = "none"

[[rules]]
recipient_domain = "Bücher.Example"
route = "backup"
fallback = ["relay"]

[[rules]]
sender_domain = "shop.example"
min_priority = 5
route = "relay"

[domains."example.com"]
rate = 20

[domains."*"]
rate = 50
"""


def test_routes_shows_each_route_rule_and_limit_and_never_a_password(tmp_path):
    path = tmp_path / "routes.toml"
    path.write_text(ROUTES, encoding="utf-8")
    app = create_app(base_config(f"sqlite:///{tmp_path / 'db.sqlite3'}", ROUTES=str(path)))
    with app.app_context():
        result = app.test_cli_runner().invoke(args=["routes"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"Routes, from {path} (the first is the default):",
        "  relay: smtp.example.com:587, TLS STARTTLS, login outbox, 8 connections a worker "
        "process, at most 100 mails a second",
        "  bulk: bulk.example.com:465, TLS TLS (not verified), 1 connection a worker process, "
        "streams broadcast",
        "  backup: backup.example.com:25, TLS none, 1 connection a worker process",
        "Rules, the first that matches a message chooses its routes:",
        "  1. every recipient at xn--bcher-kva.example: backup then relay",
        "  2. from shop.example and priority 5 or more: relay",
        "Rate limits by recipient domain (mails a second):",
        "  example.com: 20",
        "  any other domain: 50",
    ]
    assert "s3cret" not in result.output


def test_without_a_routes_file_routes_shows_the_mail_settings_route(app):
    app.config.update(MAIL_SERVER="smtp.example.org", MAIL_PORT=2525)
    app.extensions.pop("outbox.routes", None)  # made again from the settings as they are now
    result = app.test_cli_runner().invoke(args=["routes"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "Routes, from OUTBOX_MAIL_* (the first is the default):"
    assert "smtp.example.org:2525" in result.output.splitlines()[1]


def test_the_outbox_command_names_its_own_version_and_keeps_flasks_url_map_as_urls(
    app, monkeypatch
):
    shown = CliRunner().invoke(main, ["--version"])
    assert shown.exit_code == 0
    assert shown.output.startswith("outbox ")
    assert "Flask" not in shown.output
    monkeypatch.setenv("OUTBOX_DATABASE_URL", app.config["DATABASE_URL"])
    monkeypatch.setenv("OUTBOX_SECRET_KEY", "test")
    urls = CliRunner().invoke(main, ["urls"])
    assert urls.exit_code == 0, urls.output
    assert "/api/messages" in urls.output
    routes = CliRunner().invoke(main, ["routes"])
    assert routes.exit_code == 0, routes.output
    assert routes.output.startswith("Routes, from OUTBOX_MAIL_*")
