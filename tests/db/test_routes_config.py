"""OUTBOX_ROUTES: a TOML or JSON file read into routes, rules and limits, or refused by name."""

import json
import logging
from pathlib import Path

import pytest

from outbox import create_app
from outbox.capabilities import routes
from outbox.capabilities.routes import Route, Rule
from outbox.capabilities.routes.config import RoutesError, load
from outbox.config import DEFAULTS
from tests.support.app import base_config

CONFIG = {**DEFAULTS, "SMTP_TIMEOUT": 7.0, "MAIL_MAX_CONNECTIONS": 2}
EXAMPLE = """
[[routes]]                 # one per SMTP server
name = "relay"
host = "smtp.example.com"
port = 587
tls = "starttls"
username = "outbox"
password = "s3cret"
max_connections = 8
rate = 100

[[routes]]
name = "backup"
host = "backup.example.com"
tls = "ssl"
password_env = "BACKUP_PASSWORD"
username = "outbox"
tls_verify = false

[[rules]]
recipient_domain = "Bücher.Example"
route = "backup"
fallback = ["relay"]

[[rules]]
sender_domain = "shop.example"
min_priority = 5
route = "relay"
fallback = ["backup"]

[domains."GMAIL.com."]
rate = 20

[domains."*"]
rate = 200.5
"""
AS_JSON = {
    "routes": [
        {"name": "relay", "host": "smtp.example.com", "port": 587, "tls": "starttls",
         "username": "outbox", "password": "s3cret", "max_connections": 8, "rate": 100},
        {"name": "backup", "host": "backup.example.com", "tls": "ssl",
         "password_env": "BACKUP_PASSWORD", "username": "outbox", "tls_verify": False},
    ],
    "rules": [
        {"recipient_domain": "Bücher.Example", "route": "backup", "fallback": ["relay"]},
        {"sender_domain": "shop.example", "min_priority": 5, "route": "relay",
         "fallback": ["backup"]},
    ],
    "domains": {"GMAIL.com.": {"rate": 20}, "*": {"rate": 200.5}},
}  # fmt: skip
ENVIRON = {"BACKUP_PASSWORD": "from-the-environment"}
ONE = '[[routes]]\nname = "relay"\nhost = "smtp.example.com"\n'


def write(tmp_path: Path, text: str, name: str = "routes.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refused(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> str:
    path = write(tmp_path, text)
    with pytest.raises(RoutesError) as caught:
        load(path, CONFIG, environ or {})
    message = str(caught.value)
    assert message.startswith(f"OUTBOX_ROUTES {path}"), message
    return message


def test_the_example_routes_file_is_read_into_routes_rules_and_limits(tmp_path):
    table = load(write(tmp_path, EXAMPLE), CONFIG, ENVIRON)
    relay, backup = table.routes.values()
    assert table.first is relay
    assert (relay.name, relay.max_connections, relay.rate) == ("relay", 8, 100.0)
    s = relay.settings
    assert (s.server, s.port, s.use_tls, s.use_ssl, s.timeout) == (
        "smtp.example.com", 587, True, False, 7.0)  # fmt: skip
    assert (s.username, s.password, s.verify, s.ca_file) == ("outbox", "s3cret", True, None)
    # ssl without a port: 465; the password from the variable; verification off for it alone.
    b = backup.settings
    assert (b.port, b.use_ssl, b.use_tls, b.verify) == (465, True, False, False)
    assert b.password == "from-the-environment"
    assert (backup.max_connections, backup.rate) == (2, None)  # MAIL_MAX_CONNECTIONS; no limit
    assert table.rules == (
        Rule("backup", ("relay",), recipient_domain="xn--bcher-kva.example"),
        Rule("relay", ("backup",), sender_domain="shop.example", min_priority=5),
    )
    assert table.domains == {"gmail.com": 20.0, "*": 200.5}


def test_json_with_the_same_keys_reads_the_same(tmp_path):
    from_toml = load(write(tmp_path, EXAMPLE), CONFIG, ENVIRON)
    from_json = load(write(tmp_path, json.dumps(AS_JSON), "routes.JSON"), CONFIG, ENVIRON)
    assert from_json == from_toml


def test_a_route_without_tls_settings_takes_them_from_the_mail_settings(tmp_path):
    ca = tmp_path / "missing-ca.pem"
    config = {**CONFIG, "MAIL_TLS_VERIFY": False, "MAIL_ALLOW_PLAINTEXT_AUTH": True}
    (route,) = load(write(tmp_path, ONE), config, {}).routes.values()
    assert (route.settings.verify, route.settings.allow_plaintext_auth) == (False, True)
    assert (route.settings.port, route.settings.use_tls) == (587, True)  # starttls by default
    # A CA file of the route's own is loaded at once: a missing one is refused by name.
    text = ONE + f'ca_file = "{ca}"\n'
    assert f'routes #1 "relay": ca_file {ca} cannot be used' in refused(tmp_path, text)


# (the file's text, what the refusal says after the file's name)
REFUSALS = [
    ('[[route]]\nname = "a"\nhost = "h"\n', "the file: unknown key 'route' (known: routes, rules, "
     "domains)"),
    ("", "the file: routes must be a list of tables ([[routes]] in TOML)"),
    ("routes = []\n", "the file: routes must name at least one route"),
    ('[[routes]]\nhost = "h"\n', "routes #1: name is missing"),
    ('[[routes]]\nname = "two words"\nhost = "h"\n', "routes #1: name 'two words' must be 1 to "
     "64 letters, digits, dots, hyphens or underscores, starting with a letter or digit"),
    ('[[routes]]\nname = "a"\n', 'routes #1 "a": host is missing'),
    ('[[routes]]\nname = "a"\nhost = ""\n', "routes #1 \"a\": host must be a non-empty string, "
     "not ''"),
    ('[[routes]]\nname = "a"\nhost = "h"\nhostname = "x"\n', 'routes #1 "a": unknown key '
     "'hostname' (known: name, host, port, tls, username, password, password_env, "
     "max_connections, rate, tls_verify, ca_file, streams)"),
    (ONE + '[[routes]]\nname = "relay"\nhost = "other"\n', 'routes #2: name "relay" is taken by '
     "an earlier route"),
    (ONE + 'tls = "tls"\n', 'routes #1 "relay": tls must be one of starttls, ssl, none, not '
     "'tls'"),
    (ONE + "port = 70000\n", 'routes #1 "relay": port must be 1 to 65535, not 70000'),
    (ONE + "port = 0\n", 'routes #1 "relay": port must be 1 to 65535, not 0'),
    (ONE + 'port = "587"\n', "routes #1 \"relay\": port must be a whole number, not '587'"),
    (ONE + "max_connections = 0\n", 'routes #1 "relay": max_connections must be at least 1, '
     "not 0"),
    (ONE + "max_connections = 2.5\n", 'routes #1 "relay": max_connections must be a whole '
     "number, not 2.5"),
    (ONE + "rate = 0\n", 'routes #1 "relay": rate must be above 0 (mails a second), not 0'),
    (ONE + "rate = -3.5\n", 'routes #1 "relay": rate must be above 0 (mails a second), not -3.5'),
    (ONE + "rate = true\n", 'routes #1 "relay": rate must be a number, not True'),
    (ONE + 'username = "u"\n', 'routes #1 "relay": username is set without password (or '
     "password_env)"),
    (ONE + 'password = "p"\n', 'routes #1 "relay": password is set without username'),
    (ONE + 'username = "u"\npassword = "p"\npassword_env = "P"\n', 'routes #1 "relay": password '
     "and password_env: give one"),
    (ONE + 'username = "u"\npassword_env = "UNSET_HERE"\n', 'routes #1 "relay": password_env '
     "names UNSET_HERE, which is not set or empty"),
    (ONE + 'username = "u"\npassword = "p"\ntls = "none"\n', 'routes #1 "relay": tls = "none" '
     "would send the password unencrypted; use starttls or ssl, or set "
     "OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH=true"),
    (ONE + 'tls_verify = "no"\n', "routes #1 \"relay\": tls_verify must be true or false, not "
     "'no'"),
    (ONE + '[[rules]]\nroute = "nope"\n', 'rules #1: route "nope" is not a route of the file '
     "(routes: relay)"),
    (ONE + '[[rules]]\nsender_domain = "a.example"\n', "rules #1: route is missing"),
    (ONE + '[[rules]]\nroute = "relay"\nfallback = ["spare"]\nmin_priority = 1\n',
     'rules #1: fallback "spare" is not a route of the file (routes: relay)'),
    (ONE + '[[rules]]\nroute = "relay"\nfallback = "relay"\nmin_priority = 1\n',
     'rules #1: fallback must be a list of route names, such as ["backup"]'),
    (ONE + '[[rules]]\nroute = "relay"\nfallback = ["relay"]\nmin_priority = 1\n',
     "rules #1: fallback names a route twice, or the rule's own route"),
    (ONE + '[[rules]]\nroute = "relay"\n[[rules]]\nroute = "relay"\nmin_priority = 1\n',
     "rules #1: a rule with no condition (sender_domain, recipient_domain, min_priority) matches "
     "every message: it may only be the last rule"),
    (ONE + '[[rules]]\nroute = "relay"\nrecipient_domain = "not a domain"\n',
     "rules #1: recipient_domain 'not a domain' is not a domain name"),
    (ONE + '[[rules]]\nroute = "relay"\nsender_domain = "ann@example.com"\n',
     "rules #1: sender_domain 'ann@example.com' is not a domain name"),
    (ONE + '[[rules]]\nroute = "relay"\nmin_priority = "high"\n',
     "rules #1: min_priority must be a whole number, not 'high'"),
    (ONE + '[[rules]]\nroute = "relay"\nrecipient = "a.example"\n', "rules #1: unknown key "
     "'recipient' (known: route, fallback, sender_domain, recipient_domain, min_priority)"),
    (ONE + '[domains."gmail..com"]\nrate = 2\n', 'domains."gmail..com": not a domain name (nor '
     "*, for every other domain)"),
    (ONE + '[domains."*.example.com"]\nrate = 2\n', 'domains."*.example.com": not a domain name '
     "(nor *, for every other domain)"),
    (ONE + '[domains."gmail.com"]\nburst = 2\n', "domains.\"gmail.com\": unknown key 'burst' "
     "(known: rate)"),
    (ONE + '[domains."gmail.com"]\n', 'domains."gmail.com": rate is missing'),
    (ONE + '[domains."gmail.com"]\nrate = 0\n', 'domains."gmail.com": rate must be above 0 '
     "(mails a second), not 0"),
    (ONE + '[domains."gmail.com"]\nrate = 1\n[domains."GMAIL.COM"]\nrate = 2\n',
     'domains."GMAIL.COM": gmail.com is given twice'),
    ("domains = 5\n" + ONE, 'domains: must be a table of domain names, such as '
     '[domains."gmail.com"]'),
]  # fmt: skip


@pytest.mark.parametrize(("text", "says"), REFUSALS)
def test_each_problem_is_refused_naming_the_file_and_the_key(tmp_path, text, says):
    assert refused(tmp_path, text) == f"OUTBOX_ROUTES {tmp_path / 'routes.toml'}: {says}"


def test_a_file_that_cannot_be_read_or_parsed_is_refused_by_name(tmp_path):
    with pytest.raises(RoutesError, match=r"routes.yaml: the file's name must end in .toml or"):
        load(write(tmp_path, ONE, "routes.yaml"), CONFIG, {})
    with pytest.raises(RoutesError, match=r"missing.toml cannot be read: .*No such file"):
        load(tmp_path / "missing.toml", CONFIG, {})
    with pytest.raises(RoutesError, match=r"routes.toml is not valid TOML: .*line 1"):
        load(write(tmp_path, "[[routes]\n"), CONFIG, {})
    with pytest.raises(RoutesError, match=r"routes.json is not valid JSON: "):
        load(write(tmp_path, "{routes: []}", "routes.json"), CONFIG, {})
    with pytest.raises(RoutesError, match=r"routes.json: the file: must be a table"):
        load(write(tmp_path, "[]", "routes.json"), CONFIG, {})


def test_the_app_reads_a_relative_path_in_the_instance_folder_once(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    monkeypatch.setenv("BACKUP_PASSWORD", "from-the-environment")
    write(tmp_path, EXAMPLE)
    app = create_app(base_config(f"sqlite:///{tmp_path / 'db.sqlite3'}", ROUTES="routes.toml"))
    (tmp_path / "routes.toml").unlink()  # read when the app was made, not again
    with app.app_context():
        assert list(routes.table().routes) == ["relay", "backup"]
        assert routes.table().domains["gmail.com"] == 20.0


def test_the_app_is_not_made_on_a_bad_file(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    write(tmp_path, ONE + "max_connections = 0\n")
    with pytest.raises(RoutesError) as caught:
        create_app(base_config(f"sqlite:///{tmp_path / 'db.sqlite3'}", ROUTES="routes.toml"))
    assert str(caught.value) == (f'OUTBOX_ROUTES {tmp_path / "routes.toml"}: routes #1 "relay": '
                                 "max_connections must be at least 1, not 0")  # fmt: skip


def test_without_a_file_the_mail_settings_make_the_one_default_route(app):
    app.config["MAIL_MAX_CONNECTIONS"] = 3
    (route,) = routes.table().routes.values()
    assert route == Route("default", route.settings, max_connections=3)
    assert (route.settings.server, route.settings.port) == ("127.0.0.1", 1)


def test_the_default_route_is_the_mail_settings_as_they_are_now(app):
    """One source: OUTBOX_MAIL_* (app.config), not a copy taken when the app was made."""
    app.config.update(MAIL_SERVER="relay.example.com", MAIL_PORT=465, MAIL_USE_SSL=True,
                      MAIL_USERNAME="outbox", MAIL_PASSWORD="s3cret", SMTP_TIMEOUT=9.0)  # fmt: skip
    assert app.extensions["mail"].server != "relay.example.com"
    settings = routes.table().first.settings
    assert (settings.server, settings.port, settings.use_ssl, settings.use_tls) == (
        "relay.example.com", 465, True, False)  # fmt: skip
    assert (settings.username, settings.password, settings.timeout) == ("outbox", "s3cret", 9.0)
    assert settings.verify and settings.ca_file is None and not settings.allow_plaintext_auth


def test_a_route_that_does_not_check_certificates_is_warned_of_at_worker_start(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    write(tmp_path, EXAMPLE)
    monkeypatch.setenv("BACKUP_PASSWORD", "x")
    app = create_app(base_config(f"sqlite:///{tmp_path / 'db.sqlite3'}", ROUTES="routes.toml"))
    with caplog.at_level(logging.WARNING, logger="outbox.routes"):
        routes.warn_unsafe(app)
    (warned,) = caplog.records
    assert warned.getMessage().startswith("route backup: TLS verification is off")
    assert "backup.example.com:465" in warned.getMessage()


def test_with_a_routes_file_the_unused_mail_server_is_not_warned_of_and_each_route_is(
    tmp_path, monkeypatch, caplog
):
    """OUTBOX_MAIL_TLS_VERIFY=false is inherited by a route that does not say otherwise, and
    warned of by that route's name; the OUTBOX_MAIL_* server, unused, is not spoken of."""
    monkeypatch.setenv("OUTBOX_INSTANCE_PATH", str(tmp_path))
    write(
        tmp_path,
        """
[[routes]]
name = "checked"
host = "smtp.example.com"
tls_verify = true

[[routes]]
name = "inherits"
host = "relay.example.com"

[[routes]]
name = "plain"
host = "10.0.0.7"
tls = "none"
username = "outbox"
password = "s3cret"
""",
    )
    config = base_config(f"sqlite:///{tmp_path / 'db.sqlite3'}", ROUTES="routes.toml",
                         MAIL_TLS_VERIFY=False, MAIL_ALLOW_PLAINTEXT_AUTH=True,
                         MAIL_SERVER="unused.example.com")  # fmt: skip
    app = create_app(config)
    with caplog.at_level(logging.WARNING):
        routes.warn_unsafe(app)
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 2, said
    assert said[0].startswith("route inherits: TLS verification is off")
    assert "relay.example.com:587" in said[0]
    assert said[1].startswith("route plain: OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH is on")
    assert "10.0.0.7:25" in said[1]
    assert not any("unused.example.com" in line for line in said)


def test_without_a_routes_file_the_mail_servers_safeguards_are_warned_of(app, caplog):
    app.config.update(MAIL_TLS_VERIFY=False, MAIL_SERVER="relay.example.com", MAIL_PORT=587)
    with caplog.at_level(logging.WARNING):
        routes.warn_unsafe(app)
    (said,) = [record.getMessage() for record in caplog.records]
    assert said.startswith("OUTBOX_MAIL_TLS_VERIFY is off") and "relay.example.com:587" in said
