"""The outbox list's filter: its search-box grammar, its form fields, and one typed value.

`to:@gmail.com from:shop@example.com status:failed stream:broadcast source:api
meta:order=4711 error:"mailbox full" since:24h until:2026-11-01 mailing:12
subject:invoice` and free words (matched against the recipients and the subject). The
same names are GET fields of the filter form; both are read by `parse` into a `Filter`,
which spells itself back (`spelled`) for links, chips and a bulk job's stored copy.
"""

import json
import re
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from outbox.core.status import Status
from outbox.core.streams import Stream

TERM_CHARS = 998  # longer than any subject; SQLite refuses LIKE patterns over 50,000 bytes
MAILING_MAX = 2**63 - 1
# name in the grammar -> the Filter field it fills, in the order chips show them
NAMES = {
    "status": "status", "stream": "stream", "to": "to", "from": "sender", "subject": "subject",
    "source": "source", "meta": "meta", "error": "error", "since": "since", "until": "until",
    "mailing": "mailing",
}  # fmt: skip
FORM_FIELDS = (*NAMES, "q")
TERMLIKE = re.compile(r"(?:^|\s)[A-Za-z]+:")
RELATIVE = re.compile(r"(\d{1,6})([mhdw])")
UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
META_KEY = re.compile(r"[\w.-]{1,100}")
TOKEN = re.compile(r'\s*(?:([A-Za-z]+):)?(?:"([^"]*)"|(\S+))?')


TIMES = "write a date (2026-11-01), a date and time (2026-11-01T09:30) or a time ago (24h, 7d)"


class FilterError(ValueError):
    """A term the filter does not take; the message names it."""


@dataclass(frozen=True)
class Filter:
    """What the list narrows to; None (or empty) for a filter not given.

    Times are kept as written (`24h`, `2026-11-01`) and turned into moments by `bounds`
    with the time passed in; `fixed` writes them as moments for a job that runs later.
    """

    status: str | None = None
    stream: str | None = None
    to: str | None = None  # an address, or "@domain" for every address there
    sender: str | None = None  # the From address, or "@domain"
    subject: str | None = None
    source: str | None = None  # "api" also finds "api:token-name"
    meta: tuple[tuple[str, str], ...] = ()
    error: str | None = None
    since: str | None = None  # created at or after
    until: str | None = None  # created before
    mailing: int | None = None
    words: str | None = None  # the free words: recipients or subject

    @property
    def active(self) -> bool:
        """Whether anything but the status tab narrows the list."""
        return any(getattr(self, f.name) for f in fields(self) if f.name != "status")

    @property
    def windowed(self) -> bool:
        """Whether a filter no index serves in id order is given (status and mailing are)."""
        return any(getattr(self, f.name) for f in fields(self)
                   if f.name not in ("status", "mailing"))  # fmt: skip

    def terms(self) -> list[tuple[str, str]]:
        """(name, term as typed) of each filter given but the status, in grammar order."""
        found = []
        for name, field in NAMES.items():
            value = getattr(self, field)
            if name == "status" or not value:
                continue
            if name == "meta":
                found += [("meta", f"meta:{_quoted(f'{k}={v}')}") for k, v in value]
            else:
                found.append((name, f"{name}:{_quoted(str(value))}"))
        if self.words:  # quoted only where a word would read as a term
            found.append(("q", f'"{self.words}"' if TERMLIKE.search(self.words) else self.words))
        return found

    def spelled(self, without: str | None = None) -> str:
        """The filter in the search-box grammar (the status apart: it is the tab), leaving
        out one term as `terms` gives it (a chip's removal link)."""
        return " ".join(term for _, term in self.terms() if term != without)

    def bounds(self, now: datetime) -> tuple[datetime | None, datetime | None]:
        """The since and until moments (naive UTC), relative forms counted back from now."""
        return (moment(self.since, now) if self.since else None,
                moment(self.until, now) if self.until else None)  # fmt: skip

    def fixed(self, now: datetime) -> "Filter":
        """The same filter with its times as moments, for a job that runs after now."""
        since, until = self.bounds(now)
        return replace(self, since=since.isoformat() if since else None,
                       until=until.isoformat() if until else None)  # fmt: skip

    def to_json(self) -> str:
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["meta"] = [list(pair) for pair in self.meta]
        return json.dumps({k: v for k, v in data.items() if v})

    @classmethod
    def from_json(cls, text: str) -> "Filter":
        data = json.loads(text)
        data["meta"] = tuple((k, v) for k, v in data.get("meta", ()))
        return cls(**data)


def _quoted(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) or not value else value


def tokens(text: str) -> list[tuple[str | None, str]]:
    """The (name or None, value) of each term of the search box; FilterError for an
    unclosed quote."""
    if text.count('"') % 2:
        raise FilterError('a quote is not closed: write "two words" with a quote at each end')
    found: list[tuple[str | None, str]] = []
    for match in TOKEN.finditer(text):
        name, quoted, bare = match.groups()
        if quoted is None and bare is None:
            if name is not None:
                found.append((name.lower(), ""))
            continue
        found.append((name.lower() if name else None, quoted if quoted is not None else bare))
    return found


def parse(text: str = "", form: Any = None, now: datetime | None = None) -> Filter:
    """The filter of a search box and of the form's own fields (a mapping, e.g. request.args);
    FilterError naming the first bad term."""
    terms = tokens(text or "")
    for field_name in NAMES:
        given = (
            form.getlist(field_name) if hasattr(form, "getlist") else [(form or {}).get(field_name)]
        )
        terms += [(field_name, value.strip()) for value in given if value and value.strip()]
    found: dict[str, Any] = {}
    words: list[str] = []
    for name, value in terms:
        if name is None:
            _check_text("a word", value)
            words.append(value)
            continue
        if name not in NAMES:
            raise FilterError(
                f"{name}: is not a filter (one of {', '.join(NAMES)}); "
                f'to search for the word, quote it: "{name}:{value}"'
            )
        field = NAMES[name]
        parsed = _term(name, value, now)
        if field == "meta":
            found["meta"] = (*found.get("meta", ()), parsed)
        elif field in found and found[field] != parsed:
            raise FilterError(f"{name}: is given twice ({found[field]} and {parsed})")
        else:
            found[field] = parsed
    if words:
        found["words"] = " ".join(words)
        _check_text("the words", found["words"])
    return Filter(**found)


def _check_text(what: str, value: str) -> None:
    if len(value) > TERM_CHARS or "\0" in value:
        raise FilterError(f"{what} {value[:40]!r}: at most {TERM_CHARS} characters, without NUL")


def _term(name: str, value: str, now: datetime | None) -> Any:
    """One term's value, checked; FilterError naming it."""
    term = f"{name}:{_quoted(value)}"
    if not value:
        raise FilterError(f"{name}: needs a value, as in {name}:{EXAMPLES[name]}")
    _check_text(term, value)
    if name == "status":
        if value not in {s.value for s in Status}:
            raise FilterError(f"{term}: the status is one of {', '.join(s.value for s in Status)}")
        return value
    if name == "stream":
        if value not in {s.value for s in Stream}:
            raise FilterError(f"{term}: the stream is one of {', '.join(s.value for s in Stream)}")
        return value
    if name in ("to", "from"):
        return _address(term, value, name)
    if name == "meta":
        key, sep, meta_value = value.partition("=")
        if not sep or not META_KEY.fullmatch(key):
            raise FilterError(f"{term}: write meta:key=value (a key of letters, digits, . _ -)")
        return (key, meta_value)
    if name in ("since", "until"):
        moment(value, now or datetime.now(UTC).replace(tzinfo=None), term)
        return value
    if name == "mailing":
        number = value.removeprefix("#")
        if not number.isdigit() or not 0 < int(number) <= MAILING_MAX:
            raise FilterError(f"{term}: the mailing is its number, as in mailing:12")
        return int(number)
    return value  # subject, source, error: text found anywhere in the field


def _address(term: str, value: str, name: str) -> str:
    """An address, or "@domain" for a whole domain (a bare domain for from: too)."""
    value = value.lower()
    if "@" not in value and name == "from" and "." in value:
        value = f"@{value}"
    local, at, domain = value.rpartition("@")
    if not at or not domain or "." not in domain or any(c.isspace() for c in value):
        raise FilterError(f"{term}: write an address (a@example.com) or a domain (@example.com)")
    return value if local else f"@{domain}"


def moment(value: str, now: datetime, term: str | None = None) -> datetime:
    """A date (midnight UTC), an ISO 8601 time (no zone is UTC), or a time ago: 30m, 24h,
    7d, 2w; FilterError otherwise."""
    term = term or value
    if found := RELATIVE.fullmatch(value):
        count, unit = int(found.group(1)), UNITS[found.group(2)]
        return now - timedelta(**{unit: count})
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), time())
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise FilterError(f"{term}: {TIMES}") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


EXAMPLES = {
    "status": "failed", "stream": "broadcast", "to": "@gmail.com", "from": "shop@example.com",
    "subject": "invoice", "source": "api", "meta": "order=4711", "error": '"mailbox full"',
    "since": "24h", "until": "2026-11-01", "mailing": "12",
}  # fmt: skip
