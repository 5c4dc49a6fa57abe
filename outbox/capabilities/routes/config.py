"""Reading OUTBOX_ROUTES: a TOML or JSON file of routes, rules and domain limits, checked whole.

Every problem is refused when the app is made, with the file and the key named, so a
worker never starts on a file it would read differently from what its author meant.
"""

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask

from outbox import smtp
from outbox.capabilities.routes import KEY, Route, Rule, Table, domain_key
from outbox.core.streams import NAMES as STREAM_NAMES
from outbox.core.streams import Stream
from outbox.core.streams import parse as parse_stream

TOP_KEYS = ("routes", "rules", "domains")
ROUTE_KEYS = ("name", "host", "port", "tls", "username", "password", "password_env",
              "max_connections", "rate", "tls_verify", "ca_file", "streams")  # fmt: skip
RULE_KEYS = ("route", "fallback", "sender_domain", "recipient_domain", "min_priority")
CONDITIONS = ("sender_domain", "recipient_domain", "min_priority")
DOMAIN_KEYS = ("rate",)
# tls and the port it implies when none is given.
TLS_PORTS = {"starttls": 587, "ssl": 465, "none": 25}
# A route's name: shown on pages, in URLs and in attempts.route (64 characters).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_RULE = "1 to 64 letters, digits, dots, hyphens or underscores, starting with a letter or digit"


class RoutesError(ValueError):
    """OUTBOX_ROUTES cannot be used; the message names the file, the entry and the key."""


class _Refused(Exception):
    """One problem of the file's content, named by where it is and why."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")


def init_app(app: Flask) -> None:
    """Load OUTBOX_ROUTES once, as the app is made; without it routes.default applies."""
    setting = app.config["ROUTES"]
    if setting:
        path = path_of(str(setting), app.instance_path)
        app.extensions[KEY] = load(path, app.config)


def path_of(setting: str, instance_path: str) -> Path:
    """The file OUTBOX_ROUTES names: a relative path is taken in the instance folder."""
    path = Path(setting).expanduser()
    return path if path.is_absolute() else Path(instance_path) / path


def load(path: Path, config: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Table:
    """The Table the file describes; RoutesError naming the file and the key if it is wrong."""
    try:
        return table_of(read(path), config, environ, path.parent)
    except _Refused as exc:
        raise RoutesError(f"OUTBOX_ROUTES {path}: {exc}") from None


def read(path: Path) -> Any:
    """The file parsed by its extension: .toml or .json."""
    kind = path.suffix.lower()
    if kind not in (".toml", ".json"):
        raise RoutesError(f"OUTBOX_ROUTES {path}: the file's name must end in .toml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RoutesError(f"OUTBOX_ROUTES {path} cannot be read: {exc}") from None
    try:
        return tomllib.loads(text) if kind == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise RoutesError(f"OUTBOX_ROUTES {path} is not valid {kind[1:].upper()}: {exc}") from None


def table_of(
    data: Any, config: Mapping[str, Any], environ: Mapping[str, str], folder: Path | None = None
) -> Table:
    """The Table of the parsed file; _Refused for the first problem found.

    folder: where the file is; a route's relative ca_file is taken there.
    """
    _known(data, TOP_KEYS, "the file")
    entries = _list(data, "routes", "the file", required=True)
    if not entries:
        raise _Refused("the file", "routes must name at least one route")
    routes: dict[str, Route] = {}
    for n, entry in enumerate(entries, 1):
        route = _route(entry, f"routes #{n}", config, environ, folder)
        if route.name in routes:
            raise _Refused(f"routes #{n}", f'name "{route.name}" is taken by an earlier route')
        routes[route.name] = route
    rule_entries = _list(data, "rules", "the file")
    rules = [_rule(entry, f"rules #{n}", routes) for n, entry in enumerate(rule_entries, 1)]
    for n, rule in enumerate(rules[:-1], 1):
        if not any(getattr(rule, key) is not None for key in CONDITIONS):
            raise _Refused(f"rules #{n}", "a rule with no condition (" + ", ".join(CONDITIONS)
                           + ") matches every message: it may only be the last rule")  # fmt: skip
    for stream in Stream:
        if not any(route.takes(stream) for route in routes.values()):
            raise _Refused("routes", f"no route carries {stream} mail: list it in the streams "
                           "of one, or leave streams out of one")  # fmt: skip
    return Table(routes, tuple(rules), _domains(data.get("domains", {})))


def _route(
    entry: Any, where: str, config: Mapping[str, Any], environ: Mapping[str, str],
    folder: Path | None,
) -> Route:  # fmt: skip
    if not isinstance(entry, dict):
        _known(entry, ROUTE_KEYS, where)
    name = _text(entry, "name", where, required=True)
    if not NAME.fullmatch(name):
        raise _Refused(where, f"name {name!r} must be {NAME_RULE}")
    where = f'{where} "{name}"'
    _known(entry, ROUTE_KEYS, where)
    host = _text(entry, "host", where, required=True)
    tls = _text(entry, "tls", where) or "starttls"
    if tls not in TLS_PORTS:
        raise _Refused(where, f"tls must be one of {', '.join(TLS_PORTS)}, not {tls!r}")
    port = _number(entry, "port", where, whole=True)
    if port is not None and not 1 <= port <= 65535:
        raise _Refused(where, f"port must be 1 to 65535, not {port}")
    username, password = _credentials(entry, where, environ)
    if password and tls == "none" and not config["MAIL_ALLOW_PLAINTEXT_AUTH"]:
        raise _Refused(where, 'tls = "none" would send the password unencrypted; use '
                       "starttls or ssl, or set OUTBOX_MAIL_ALLOW_PLAINTEXT_AUTH=true")  # fmt: skip
    verify = entry.get("tls_verify", config["MAIL_TLS_VERIFY"])
    if not isinstance(verify, bool):
        raise _Refused(where, f"tls_verify must be true or false, not {verify!r}")
    ca_file = _text(entry, "ca_file", where) or None
    if ca_file and folder is not None:
        # Beside the file, as its author sees it, not wherever the process was started.
        ca_file = str(path_of(ca_file, str(folder)))
    ca_file = ca_file or config["MAIL_TLS_CA_FILE"] or None
    if ca_file and tls != "none":
        try:  # loaded now, once, as config.check loads the default's
            smtp.tls_context(verify, ca_file)
        except smtp.SettingsError as exc:
            raise _Refused(where, f"ca_file {ca_file} cannot be used: {exc.__cause__}") from None
    connections = _number(entry, "max_connections", where, whole=True)
    if connections is not None and connections < 1:
        raise _Refused(where, f"max_connections must be at least 1, not {connections}")
    settings = smtp.HostSettings(
        server=host, port=int(port or TLS_PORTS[tls]), timeout=config["SMTP_TIMEOUT"],
        use_ssl=tls == "ssl", use_tls=tls == "starttls", username=username, password=password,
        verify=verify, ca_file=ca_file, allow_plaintext_auth=config["MAIL_ALLOW_PLAINTEXT_AUTH"],
    )  # fmt: skip
    max_connections = int(connections or config["MAIL_MAX_CONNECTIONS"])
    return Route(name, settings, max_connections, _rate(entry, where), _streams(entry, where))


def _streams(entry: Mapping[str, Any], where: str) -> tuple[str, ...] | None:
    """The streams a route carries (core.streams), None for every one."""
    found = entry.get("streams")
    if found is None:
        return None
    if not isinstance(found, list) or not found:
        raise _Refused(where, f'streams must be a list of stream names, such as ["broadcast"] '
                       f"(streams: {STREAM_NAMES})")  # fmt: skip
    try:
        return tuple(dict.fromkeys(parse_stream(name).value for name in found))
    except ValueError as exc:
        raise _Refused(where, f"streams: {exc}") from None


def _credentials(
    entry: Mapping[str, Any], where: str, environ: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """username and the password given in the file or read from the variable password_env."""
    username = _text(entry, "username", where)
    password = _text(entry, "password", where)
    variable = _text(entry, "password_env", where)
    if password is not None and variable is not None:
        raise _Refused(where, "password and password_env: give one")
    if variable is not None:
        password = environ.get(variable)
        if not password:
            raise _Refused(where, f"password_env names {variable}, which is not set or empty")
    if username and not password:
        raise _Refused(where, "username is set without password (or password_env)")
    if password and not username:
        raise _Refused(where, "password is set without username")
    return username or None, password or None


def _rule(entry: Any, where: str, routes: Mapping[str, Route]) -> Rule:
    _known(entry, RULE_KEYS, where)
    route = _text(entry, "route", where, required=True)
    known = ", ".join(routes)
    if route not in routes:
        raise _Refused(where, f'route "{route}" is not a route of the file (routes: {known})')
    fallback = entry.get("fallback", [])
    if not isinstance(fallback, list) or not all(isinstance(f, str) for f in fallback):
        raise _Refused(where, 'fallback must be a list of route names, such as ["backup"]')
    for name in fallback:
        if name not in routes:
            raise _Refused(where, f'fallback "{name}" is not a route of the file (routes: {known})')
    if len({route, *fallback}) != 1 + len(fallback):
        raise _Refused(where, "fallback names a route twice, or the rule's own route")
    priority = _number(entry, "min_priority", where, whole=True)
    return Rule(
        route, tuple(fallback),
        sender_domain=_domain(entry, "sender_domain", where),
        recipient_domain=_domain(entry, "recipient_domain", where),
        min_priority=None if priority is None else int(priority),
    )  # fmt: skip


def _domains(data: Any) -> dict[str, float]:
    if not isinstance(data, dict):
        raise _Refused("domains", 'must be a table of domain names, such as [domains."gmail.com"]')
    limits: dict[str, float] = {}
    for raw, entry in data.items():
        where = f'domains."{raw}"'
        name = raw if raw == "*" else domain_key(raw)
        if name is None:
            raise _Refused(where, "not a domain name (nor *, for every other domain)")
        if name in limits:
            raise _Refused(where, f"{name} is given twice")
        _known(entry, DOMAIN_KEYS, where)
        rate = _rate(entry, where)
        if rate is None:
            raise _Refused(where, "rate is missing")
        limits[name] = rate
    return limits


def _domain(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    raw = entry.get(key)
    if raw is None:
        return None
    found = domain_key(raw)
    if found is None:
        raise _Refused(where, f"{key} {raw!r} is not a domain name")
    return found


def _rate(entry: Mapping[str, Any], where: str) -> float | None:
    rate = _number(entry, "rate", where)
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise _Refused(where, f"rate must be above 0 (mails a second), not {rate}")
    return None if rate is None else float(rate)


def _known(entry: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(entry, dict):
        raise _Refused(where, f"must be a table (an object) with the keys {', '.join(keys)}")
    unknown = [key for key in entry if key not in keys]
    if unknown:
        raise _Refused(where, f"unknown key {unknown[0]!r} (known: {', '.join(keys)})")


def _list(data: Mapping[str, Any], key: str, where: str, required: bool = False) -> list[Any]:
    found = data.get(key)
    if found is None and not required:
        return []
    if not isinstance(found, list):
        raise _Refused(where, f"{key} must be a list of tables ([[{key}]] in TOML)")
    return found


def _text(entry: Mapping[str, Any], key: str, where: str, required: bool = False) -> Any:
    found = entry.get(key)
    if found is None and required:
        raise _Refused(where, f"{key} is missing")
    if found is not None and (not isinstance(found, str) or not found.strip()):
        raise _Refused(where, f"{key} must be a non-empty string, not {found!r}")
    return found


def _number(entry: Mapping[str, Any], key: str, where: str, whole: bool = False) -> Any:
    found = entry.get(key)
    kinds = (int,) if whole else (int, float)
    if found is not None and (isinstance(found, bool) or not isinstance(found, kinds)):
        kind = "a whole number" if whole else "a number"
        raise _Refused(where, f"{key} must be {kind}, not {found!r}")
    return found
