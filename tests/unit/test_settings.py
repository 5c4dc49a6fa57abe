"""The settings schema: each kind read from an OUTBOX_* string, the groups, and their checks."""

import re
from pathlib import Path

import pytest

from outbox import config
from outbox.capabilities import retention
from outbox.capabilities.routes import settings as routes
from outbox.capabilities.suppression import settings as suppression
from outbox.core import config_schema as schema
from outbox.core import settings as messages
from outbox.worker import settings as worker

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("raw", "value"), [
    ("1", True), ("true", True), (" Yes ", True), ("ON", True),
    ("0", False), ("false", False), ("no", False), ("off", False), ("", False),
])  # fmt: skip
def test_a_bool_takes_the_words_environment_variables_use(raw, value):
    assert schema.BOOL.read(raw) is value


@pytest.mark.parametrize(("kind", "raw", "value"), [
    (schema.INT, "2525", 2525), (schema.INT, " 7 ", 7),
    (schema.NUMBER, "1.5", 1.5), (schema.NUMBER, "60", 60.0),
    (schema.TEXT, " smtp.internal ", " smtp.internal "),
    (schema.DOMAINS, "Local, .internal., ,corp", frozenset({"local", "internal", "corp"})),
    (schema.DOMAINS, "", frozenset()),
])  # fmt: skip
def test_each_kind_reads_its_string(kind, raw, value):
    found = kind.read(raw)
    assert found == value and type(found) is type(value)


@pytest.mark.parametrize(("setting", "raw", "said"), [
    (schema.Setting("MAIL_USE_SSL", schema.BOOL, False, "x"), "maybe",
     "OUTBOX_MAIL_USE_SSL: expected true or false, got 'maybe'"),
    (schema.Setting("MAIL_PORT", schema.INT, 25, "x"), "twenty",
     "OUTBOX_MAIL_PORT: expected a number, got 'twenty'"),
    (schema.Setting("MAIL_PORT", schema.INT, 25, "x"), "2.5",
     "OUTBOX_MAIL_PORT: expected a number, got '2.5'"),
    (schema.Setting("SMTP_TIMEOUT", schema.NUMBER, 30.0, "x"), "soon",
     "OUTBOX_SMTP_TIMEOUT: expected a number, got 'soon'"),
])  # fmt: skip
def test_a_string_its_kind_cannot_read_is_refused_naming_the_variable(setting, raw, said):
    with pytest.raises(ValueError) as caught:
        setting.parse(raw)
    assert str(caught.value) == said


def test_the_environment_is_read_by_each_settings_declared_kind():
    environ = {"OUTBOX_MAIL_PORT": "2525", "OUTBOX_MAIL_USE_TLS": "yes",
               "OUTBOX_RETRY_BACKOFF": "1.5", "OUTBOX_ALLOWED_SPECIAL_DOMAINS": "Local",
               "OUTBOX_ROUTES": "routes.toml", "MAIL_PORT": "1", "OUTBOX_UNKNOWN": "x"}  # fmt: skip
    assert config.from_environ(environ) == {
        "MAIL_PORT": 2525, "MAIL_USE_TLS": True, "RETRY_BACKOFF": 1.5,
        "ALLOWED_SPECIAL_DOMAINS": frozenset({"local"}), "ROUTES": "routes.toml",
    }  # fmt: skip


def test_every_setting_is_declared_once_in_one_group_with_a_default_of_its_kind():
    declared = [s.name for group in config.GROUPS for s in group.settings]
    assert len(declared) == len(set(declared)) == len(config.DEFAULTS)
    assert len({group.name for group in config.GROUPS}) == len(config.GROUPS)
    for group in config.GROUPS:
        assert group.about.strip() and group.about.endswith(".")
        for setting in group.settings:
            assert re.fullmatch(r"[A-Z][A-Z0-9_]+", setting.name)
            assert setting.description.strip() and not setting.description.endswith(".")
            if setting.kind in (schema.BOOL, schema.INT, schema.NUMBER):
                # the default is what the same value read from the environment would be
                found = setting.kind.read(str(setting.default).lower())
                assert found == setting.default and type(found) is type(setting.default)


def test_every_group_declared_in_the_package_is_assembled():
    """A group outbox.config does not list would be neither checked nor documented."""
    modules = [p for p in (ROOT / "outbox").rglob("*.py") if "\nGROUP = Group(" in p.read_text()]
    assert len(modules) == len(config.GROUPS) - 1  # the app's own is config.APP
    assert config.APP in config.GROUPS


def test_the_defaults_pass_every_groups_check():
    for group in config.GROUPS:
        group.check(config.DEFAULTS)


@pytest.mark.parametrize(("check", "changed", "said"), [
    (worker.check, {"SMTP_TIMEOUT": 30, "LOCK_TIMEOUT": 60}, "LOCK_TIMEOUT must be at least 4 x"),
    (worker.check, {"BATCH_SIZE": 0}, "BATCH_SIZE, MAX_ATTEMPTS and RECORD_EVERY"),
    (worker.check, {"RECORD_AFTER": 0.0}, "RECORD_AFTER must be above 0"),
    (worker.check, {"RETRY_BACKOFF": 0.5}, "RETRY_BACKOFF must be 1 or more"),
    (routes.check, {"MAIL_MAX_CONNECTIONS": 0}, "MAIL_MAX_CONNECTIONS must be at least 1"),
    (routes.check, {"MAIL_USE_TLS": True, "MAIL_USE_SSL": True}, "set one"),
    (routes.check, {"MAIL_TLS_CA_FILE": "/nonexistent/ca.pem"},
     "OUTBOX_MAIL_TLS_CA_FILE /nonexistent/ca.pem cannot be used"),
    (retention.check_settings, {"RETENTION_DAYS": 10, "RETENTION_BODY_DAYS": 20},
     "bodies cannot outlive their messages"),
    (retention.check_settings, {"AUDIT_RETENTION_DAYS": -1}, "are 0 \\(keep for good\\) or more"),
    (suppression.check, {"SUPPRESSED": "bounce"}, "must be mark or reject"),
    (messages.check, {"ALLOWED_SPECIAL_DOMAINS": "local"}, "a set of domain names"),
    (messages.check, {"ALLOWED_SPECIAL_DOMAINS": {"Local."}}, "a set of domain names"),
    (config.check_app, {"LOG_FORMAT": "xml"}, "must be one of text, json, not 'xml'"),
])  # fmt: skip
def test_a_group_refuses_what_cannot_work_and_so_does_the_whole(check, changed, said):
    with pytest.raises(ValueError, match=said):
        check({**config.DEFAULTS, **changed})
    with pytest.raises(ValueError, match=said):
        config.check({**config.DEFAULTS, **changed})


def test_a_retention_of_bodies_within_that_of_messages_is_taken():
    retention.check_settings({**config.DEFAULTS, "RETENTION_DAYS": 30, "RETENTION_BODY_DAYS": 30})
    retention.check_settings({**config.DEFAULTS, "RETENTION_DAYS": 0, "RETENTION_BODY_DAYS": 0})
