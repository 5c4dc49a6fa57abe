"""The settings: every group assembled, OUTBOX_* variables read by type, each group's check run.

Each part of outbox declares its settings where its code is (a `settings` module with a
GROUP: names, kinds, defaults, units, descriptions, and the check that refuses what
cannot work); this module puts them together in the order the reference shows them.
Every name can be set as OUTBOX_<NAME> in the environment or as <NAME> in
instance/config.py.
"""

from collections.abc import Mapping
from typing import Any

from outbox.auth import settings as auth
from outbox.capabilities import retention
from outbox.capabilities.bounces import settings as bounces
from outbox.capabilities.capture import settings as capture
from outbox.capabilities.dkim import settings as dkim
from outbox.capabilities.domains import settings as domains
from outbox.capabilities.guardrails import settings as guardrails
from outbox.capabilities.mailings import settings as mailings
from outbox.capabilities.routes import settings as routes
from outbox.capabilities.submission import settings as submission
from outbox.capabilities.suppression import settings as suppression
from outbox.capabilities.webhooks import settings as webhooks
from outbox.core import logs
from outbox.core import settings as messages
from outbox.core.config_schema import BOOL, TEXT, Group, Setting, domain_names
from outbox.ops import settings as ops
from outbox.worker import settings as worker

__all__ = ["DEFAULTS", "DESCRIPTIONS", "GROUPS", "SETTINGS", "check", "coerce", "domain_names",
           "from_environ", "type_name"]  # fmt: skip


def check_app(config: Mapping[str, Any]) -> None:
    """ValueError if LOG_FORMAT names no format."""
    if config["LOG_FORMAT"] not in logs.FORMATS:
        raise ValueError(
            f"LOG_FORMAT (OUTBOX_LOG_FORMAT) must be one of {', '.join(logs.FORMATS)}, "
            f"not {config['LOG_FORMAT']!r}"
        )


# fmt: off
APP = Group(
    "The app",
    "Where outbox keeps its data, what signs its sessions, the proxy in front of it, how its "
    "processes log.",
    (
        Setting("DATABASE_URL", TEXT, None,
                description="any SQLAlchemy URL; none: the SQLite file `instance/outbox.sqlite3`"),
        Setting("SECRET_KEY", TEXT, None,
                description="signs sessions; give every web process the same one; none: a random "
                "key, kept in `instance/secret_key`"),
        # The web processes' (outbox.web applies it); declared here, not in outbox.web:
        # `outbox check` reads this module, and the commands may not import the pages.
        Setting("TRUST_PROXY", BOOL, False,
                description="behind one reverse proxy: take the client address and scheme from "
                "its `X-Forwarded-For` and `X-Forwarded-Proto`"),
        Setting("LOG_FORMAT", TEXT, "text",
                description="how `outbox worker`, `send-queued` and `demo` log to stderr: `text` "
                "lines, or `json`: one object a line with `time` (UTC), `level`, `logger`, "
                "`message`, `exception` when there is one, and fields such as `worker_id`. Any "
                "other value stops the process at start"),
    ),
    check_app,
)
# fmt: on

# In the order the reference shows them and their checks run.
GROUPS: tuple[Group, ...] = (
    APP, messages.GROUP, routes.GROUP, capture.GROUP, worker.GROUP, auth.GROUP, ops.GROUP,
    suppression.GROUP, retention.GROUP, dkim.GROUP, domains.GROUP, mailings.GROUP, bounces.GROUP,
    guardrails.GROUP, webhooks.GROUP, submission.GROUP,
)  # fmt: skip


def _by_name(groups: tuple[Group, ...]) -> dict[str, Setting]:
    """Every setting by its name; a name declared twice is a mistake caught on import."""
    found: dict[str, Setting] = {}
    for group in groups:
        for setting in group.settings:
            if setting.name in found:
                raise RuntimeError(f"setting {setting.name} is declared twice")
            found[setting.name] = setting
    return found


SETTINGS: dict[str, Setting] = _by_name(GROUPS)
DEFAULTS: dict[str, Any] = {name: setting.default for name, setting in SETTINGS.items()}
DESCRIPTIONS: dict[str, str] = {name: setting.description for name, setting in SETTINGS.items()}


def type_name(name: str) -> str:
    """The type a setting's value is read as, in a reader's words."""
    return SETTINGS[name].kind.words


def coerce(name: str, raw: str) -> Any:
    """One environment string as the type its setting declares."""
    return SETTINGS[name].parse(raw)


def from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings given as OUTBOX_* variables, typed."""
    found = {}
    for name, setting in SETTINGS.items():
        raw = environ.get(f"OUTBOX_{name}")
        if raw is not None:
            found[name] = setting.parse(raw)
    return found


def check(config: Mapping[str, Any]) -> None:
    """Refuse settings that cannot work: each group's check, in turn."""
    for group in GROUPS:
        group.check(config)
