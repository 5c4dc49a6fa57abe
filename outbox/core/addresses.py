"""Mail addresses as structured values: parsed once at the edge, stored and sent as parts."""

import functools
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from email.headerregistry import Address
from enum import StrEnum

import email_validator
import idna
from email_validator import EmailNotValidError, ValidatedEmail, validate_email
from email_validator.rfc_constants import CASE_INSENSITIVE_MAILBOX_NAMES

# Every character str.splitlines() ends a line at: the email package folds header
# values on these too, so any of them lets a value start a header of its own.
LINE_BREAKS = r"\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029"
LINE_BREAK = re.compile(f"[{LINE_BREAKS}]")
LINE_BREAK_ERROR = "must not contain a line break (CR, LF or another line separator)"
# The everyday address: no display name, an ASCII dot-atom before the @, and letters,
# digits, hyphens and dots after it. email_validator and the email package keep such an
# address as it is but for its domain, so only the domain needs their (slow) checks.
PLAIN_ADDRESS = re.compile(r"([\w+-]+(?:\.[\w+-]+)*)@([A-Za-z0-9.-]+)", re.ASCII)
# The special-use domains (RFC 6761 and others: local, test, onion, ...) email_validator
# refuses. It reads them from a module-wide list on each call, the knob its README
# offers; companies run mail inside some of them (host.local), which an app allows with
# ALLOWED_SPECIAL_DOMAINS. Each check puts in the list without the app's own, under one
# lock, and puts the whole list back: several apps in one process (tests) never see
# each other's.
SPECIAL_USE = tuple(email_validator.SPECIAL_USE_DOMAIN_NAMES)
_SPECIAL_USE_LOCK = threading.Lock()
NOT_ALLOWED_HINT = "; OUTBOX_ALLOWED_SPECIAL_DOMAINS can allow it"
SHOWN_CHARS = 200  # of a refused value, in its error


def address_error(value: str, why: str = "") -> str:
    """The one wording of a refused address, with why the checks refused it if they say.

    A long value is shown by its start: an error names it, it does not echo a megabyte.
    """
    shown = value if len(value) <= SHOWN_CHARS else f"{value[:SHOWN_CHARS]}..."
    return f"{shown!r} is not an email address" + (f": {why}" if why else "")


class Kind(StrEnum):
    """Which header (or none, for Bcc) a recipient is named in."""

    TO = "to"
    CC = "cc"
    BCC = "bcc"


@dataclass(frozen=True, slots=True)
class Mailbox:
    """One address: the checked addr-spec and the display name given with it ("" for none)."""

    address: str
    name: str = ""

    def __str__(self) -> str:
        """As a person writes it: `Ann <ann@example.com>`, quoted where RFC 5322 needs it."""
        return written(self.address, self.name) if self.name else self.address

    @property
    def domain(self) -> str:
        return self.address.rpartition("@")[2]


@functools.lru_cache(maxsize=4096)
def written(address: str, name: str) -> str:
    """An address with its display name as RFC 5322 writes it (the same few come back often).

    A UTF-8 local part (RFC 6532) is given to Address in its parts: as an addr_spec the
    email package refuses it (NonASCIILocalPartDefect, a ValueError).
    """
    try:
        return str(Address(display_name=name, addr_spec=address))
    except ValueError:
        local, _, domain = address.rpartition("@")
        return str(Address(display_name=name, username=local, domain=domain))


@functools.lru_cache(maxsize=4096)
def a_label(domain: str) -> str:
    """A domain as it goes on the wire: IDNA2008 A-labels, ValueError if IDNA2008 refuses it.

    UTS #46 mapping, non-transitional (the idna package), as email_validator checked it at
    enqueue: faß.example is xn--fa-hia.example. Never Python's "idna" codec, which is
    IDNA2003 and sends ß as ss, to another domain. An ASCII name goes as it is.
    """
    if domain.isascii() and "xn--" not in domain.lower():
        return domain
    try:
        return idna.encode(domain, uts46=True, transitional=False).decode("ascii")
    except UnicodeError as exc:  # idna.IDNAError is one
        raise ValueError(f"IDNA2008 refuses the domain {domain!r}: {exc}") from None


def stored(to: list[Mailbox], cc: list[Mailbox], bcc: list[Mailbox]) -> list[dict[str, str]]:
    """The recipients column: To, Cc and Bcc in the order given, as {kind, address[, name]}."""
    return [
        {"kind": kind, "address": m.address, "name": m.name} if m.name
        else {"kind": kind, "address": m.address}
        for kind, listed in ((Kind.TO.value, to), (Kind.CC.value, cc), (Kind.BCC.value, bcc))
        for m in listed
    ]  # fmt: skip


def from_stored(entry: dict[str, str]) -> Mailbox:
    """The mailbox of one entry of the recipients column."""
    return Mailbox(entry["address"], entry.get("name", ""))


def by_kind(entries: list[dict[str, str]]) -> dict[Kind, list[Mailbox]]:
    """The recipients column read back: the mailboxes of To, Cc and Bcc, each in order."""
    found: dict[Kind, list[Mailbox]] = {kind: [] for kind in Kind}
    for entry in entries:
        found[entry["kind"]].append(from_stored(entry))  # type: ignore[index]  # a Kind's value
    return found


def parse(values: Iterable[str], allowed: frozenset[str] = frozenset()) -> list[Mailbox]:
    """The mailboxes of strings that may each hold a comma-separated list; ValueError if bad.

    allowed names the special-use domains (ALLOWED_SPECIAL_DOMAINS) taken as any other.
    """
    found: list[Mailbox] = []
    for value in values:
        if LINE_BREAK.search(value):
            raise ValueError(LINE_BREAK_ERROR)
        if not value.strip():
            continue
        if plain := _plain(value, allowed):
            found.append(plain)
        elif len(value) <= 1000:
            found.extend(_checked_remembered(value, allowed))
        else:
            found.extend(_checked(value, allowed))
    return found


def _validated(address: str, allowed: frozenset[str]) -> ValidatedEmail:
    """email_validator's check (no DNS), the allowed special-use domains taken as any other."""
    with _SPECIAL_USE_LOCK:
        if not allowed:  # the whole list is in place: every swap below puts it back
            return validate_email(address, check_deliverability=False)
        email_validator.SPECIAL_USE_DOMAIN_NAMES = [d for d in SPECIAL_USE if d not in allowed]
        try:
            return validate_email(address, check_deliverability=False)
        finally:
            email_validator.SPECIAL_USE_DOMAIN_NAMES = list(SPECIAL_USE)


@functools.lru_cache(maxsize=4096)
def _domain(domain: str, allowed: frozenset[str]) -> str | None:
    """An address domain as email_validator normalizes it, or None if it refuses it."""
    try:
        return _validated(f"a@{domain}", allowed).domain
    except EmailNotValidError:
        return None


def _plain(value: str, allowed: frozenset[str] = frozenset()) -> Mailbox | None:
    """A plain address as the full checks would give it, with the domain check cached.

    None for anything else, which then takes the full checks.
    """
    match = PLAIN_ADDRESS.fullmatch(value)
    if match is None or len(value) > 200:
        return None
    local, domain = match.groups()
    if len(local) > 64 or local.lower() in CASE_INSENSITIVE_MAILBOX_NAMES:
        return None
    checked = _domain(domain, allowed)
    return None if checked is None else Mailbox(f"{local}@{checked}")


def _checked(value: str, allowed: frozenset[str] = frozenset()) -> tuple[Mailbox, ...]:
    """The mailboxes of one string, each of its entries parsed and checked in full."""
    found = []
    for entry in entries(value):
        name, addr = entry.name, entry.address
        try:
            checked = _validated(addr, allowed)
        except EmailNotValidError as exc:
            why = str(exc) + (NOT_ALLOWED_HINT if "special-use" in str(exc) else "")
            raise ValueError(address_error(addr, why)) from None
        found.append(Mailbox(checked.normalized, name))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of an address list as written: its display name and its addr-spec, unchecked."""

    name: str
    address: str


class _Scan:
    """One entry read character by character: what stands in quotes, comments, brackets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.phrase: list[str] = []  # before <, quotes kept: the bare address if no <
        self.name: list[str] = []  # before <, quotes taken off, spaces run together
        self.address: list[str] = []  # inside < >
        self.after: list[str] = []  # past >
        self.comments: list[str] = []  # the outermost comments' text
        self.angle = "before"  # before, inside, after

    def refuse(self, why: str) -> ValueError:
        return ValueError(address_error(self.text.strip(), why))

    def run(self) -> Entry | None:
        """The entry read, None if it is empty; ValueError naming it if it is not one address."""
        position, end = 0, len(self.text)
        while position < end:
            char = self.text[position]
            if char == '"':
                position = self._quoted(position)
                continue
            if char == "(":
                position = self._comment(position)
                continue
            self._plain(char)
            position += 1
        return self._entry()

    def _quoted(self, start: int) -> int:
        """Take a quoted string from start; the position past it."""
        position, text, inside = start + 1, self.text, []
        while position < len(text) and text[position] != '"':
            if text[position] == "\\":
                position += 1
            if position < len(text):
                inside.append(text[position])
            position += 1
        if position >= len(text):
            raise self.refuse('a quote (") is not closed')
        raw = text[start : position + 1]
        self._keep(raw, "".join(inside))
        return position + 1

    def _comment(self, start: int) -> int:
        """Skip a comment from start, nested ones in it counted, not recursed into."""
        depth, position, text = 0, start, self.text
        while position < len(text):
            char = text[position]
            if char == "\\":
                position += 2
                continue
            if char == "(":
                depth += 1
                if depth > MAX_COMMENT_NESTING:
                    raise self.refuse(f"comments nested more than {MAX_COMMENT_NESTING} deep")
            elif char == ")":
                depth -= 1
                if depth == 0:
                    self.comments.append(text[start + 1 : position].strip())
                    return position + 1
            position += 1
        raise self.refuse("a comment's ( is not closed")

    def _keep(self, raw: str, meant: str) -> None:
        """Add text to the part being read: raw as written, meant as a name reads it."""
        if self.angle == "inside":
            self.address.append(raw)
        elif self.angle == "after":
            self.after.append(raw)
        else:
            self.phrase.append(raw)
            self.name.append(meant)

    def _plain(self, char: str) -> None:
        if char == "<":
            if self.angle != "before":
                raise self.refuse("one entry is one address: separate addresses with commas")
            self.angle = "inside"
        elif char == ">":
            if self.angle != "inside":
                raise self.refuse("a > without its <")
            self.angle = "after"
        elif char in ":;" and self.angle != "inside":
            raise self.refuse("groups (name: addresses;) are not taken: give each address")
        elif char == ")":
            raise self.refuse("a ) without its (")
        elif self.angle == "before" and char.isspace():
            self._keep(char, " " if self.name and self.name[-1] != " " else "")
        else:
            self._keep(char, char)

    def _entry(self) -> Entry | None:
        if self.angle == "inside":
            raise self.refuse("a < is not closed")
        if "".join(self.after).strip():
            raise self.refuse("one entry is one address: separate addresses with commas")
        name, phrase = "".join(self.name).strip(), "".join(self.phrase).strip()
        if self.angle == "after":
            if any(char in _NOT_IN_A_NAME for char in _unquoted(phrase)):
                raise self.refuse("the name before <address> holds an @, [ or ]: quote it "
                                  '("...") or separate addresses with commas')  # fmt: skip
            return Entry(name, "".join(self.address).strip())
        if not phrase:
            if self.comments:
                raise self.refuse("no address, only a comment")
            return None
        if sum("@" in word for word in _unquoted(phrase).split()) > 1:
            raise self.refuse("one entry is one address: separate addresses with commas")
        return Entry(self.comments[0] if self.comments else "", phrase)


MAX_COMMENT_NESTING = 5  # comments in comments an entry may hold (each level is a "(")
_NOT_IN_A_NAME = frozenset("@[]")


def _unquoted(text: str) -> str:
    """text less its quoted strings: what stands outside quotes."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', "", text)


def split_entries(value: str) -> list[str]:
    """value cut at the commas outside quotes, comments and angle brackets, as written."""
    found, start, quoted, depth, angle, position = [], 0, False, 0, False, 0
    while position < len(value):
        char = value[position]
        if char == "\\" and (quoted or depth):
            position += 1
        elif char == '"' and not depth:
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")" and depth:
            depth -= 1
        elif not quoted and not depth and char in "<>":
            angle = char == "<"
        elif char == "," and not (quoted or depth or angle):
            found.append(value[start:position])
            start = position + 1
        position += 1
    found.append(value[start:])
    return found


def entries(value: str) -> list[Entry]:
    """The entries of a comma-separated list, each one address; ValueError naming one that is not.

    Read here, without recursion, rather than by email.utils.getaddresses: that takes
    "<a@example.com> <b@example.org>" for two addresses (how it reads such text has
    changed between Python patch releases) and recurses into nested comments and groups.
    """
    found = []
    for text in split_entries(value):
        if (entry := _Scan(text).run()) is not None:
            found.append(entry)
    return found


def listed(values: Iterable[str]) -> list[tuple[str, str]]:
    """(name, address) of each entry that is one address, unchecked: for mail as it came.

    A header of a mail from elsewhere is read leniently: an entry that is not one
    address (a group, an empty "undisclosed-recipients:;") is left out, not refused.
    """
    found = []
    for value in values:
        for text in split_entries(value):
            try:
                entry = _Scan(text).run()
            except ValueError:
                continue
            if entry is not None and entry.address:
                found.append((entry.name, entry.address))
    return found


# Senders and reply-to addresses come back message after message, display names and
# all; the full checks of one are slow (bench/README).
_checked_remembered = functools.lru_cache(maxsize=1024)(_checked)
