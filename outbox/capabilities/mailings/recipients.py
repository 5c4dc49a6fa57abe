"""A mailing's recipients: each checked, then stored as a message row, a chunk per INSERT.

A recipient row holds its address, fields and the subject it gets (templates.Subject, for
the list, the API and search); its bodies stay empty, and a worker renders the mail from
the mailing at send time (outbox.capabilities.mailings.render). The queue
inserts the rows (queue.insert_rows), in the caller's transaction, so a request's
recipients are stored all or none.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flask import current_app

from outbox.capabilities.mailings import unsubscribe
from outbox.capabilities.mailings.head import Head
from outbox.capabilities.mailings.templates import (
    BUILTIN_VARIABLES,
    Subject,
    TemplateProblem,
    oversize,
)
from outbox.capabilities.suppression import screen
from outbox.core.addresses import LINE_BREAK, LINE_BREAK_ERROR, Kind, parse
from outbox.core.checks import UNSTORABLE_ERROR, unstorable
from outbox.core.recipients import Recipient
from outbox.core.streams import Stream
from outbox.models.db import db
from outbox.queue import PAUSED_UNTIL, insert_row, insert_rows
from outbox.queue.store import message_row, msgid_domain

MAX_RECIPIENTS = 100_000  # in one request
CHUNK_ROWS = 2_000  # rows per INSERT: a recipient row is a few hundred bytes
FIELDS_BYTES = 16_384  # one recipient's fields as JSON
MAX_ERRORS = 100  # errors named in one answer; checking stops there
KEYS = frozenset({"email", "name", "fields"})


def _checked(item: Any, allowed: frozenset[str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A recipient's stored entry and fields, and (field, error) for each fault."""
    if not isinstance(item, dict):
        return {}, [("recipient", "must be a JSON object {email, name?, fields?}")]
    errors = [(str(k), "is not a field of a recipient") for k in item if k not in KEYS]
    email, name, fields = item.get("email"), item.get("name") or "", item.get("fields") or {}
    entry: dict[str, Any] = {"kind": "to", "address": "", "name": ""}
    try:
        if not isinstance(email, str) or unstorable(email):
            raise ValueError("must be an address")
        found = parse([email], allowed)
        if len(found) != 1:
            raise ValueError(f"must be one address, not {len(found)}")
        entry.update(address=found[0].address, name=found[0].name)
    except ValueError as exc:
        given = repr(email[:320]) if isinstance(email, str) else "the value given"
        errors.append(("email", f"{given}: {exc}"))
    if not isinstance(name, str) or unstorable(name) or len(name) > 998:
        errors.append(("name", f"must be a string of at most 998 characters; {UNSTORABLE_ERROR}"))
    elif LINE_BREAK.search(name):
        errors.append(("name", LINE_BREAK_ERROR))
    elif name:
        entry["name"] = name
    if not isinstance(fields, dict) or unstorable(fields):
        errors.append(("fields", f"must be a JSON object; {UNSTORABLE_ERROR}"))
    elif len(json.dumps(fields)) > FIELDS_BYTES:
        errors.append(("fields", f"must be at most {FIELDS_BYTES} bytes as JSON"))
    else:
        errors += [(f"fields.{n}", f"is {BUILTIN_VARIABLES[n]} in the templates, not a field")
                   for n in sorted(BUILTIN_VARIABLES.keys() & fields.keys())]  # fmt: skip
    return {"entry": Recipient(Kind.TO, entry["address"], entry["name"]), "fields": fields}, errors


def inserted(stmt: Any, values: dict[str, Any]) -> int:
    """Run a one-row INSERT of a mailing's own in the session's transaction; the new row's id."""
    key = db.session.connection().execute(stmt, values).inserted_primary_key
    assert key is not None  # a single-row INSERT always has one
    return int(key[0])


@dataclass
class Writer:
    """Checks recipients one by one and inserts them a chunk at a time under a mailing."""

    mailing_id: int
    head: Head
    max_attempts: int
    now: datetime
    paused: bool = False
    count: int = 0  # recipients read
    errors: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)  # OUTBOX_SUPPRESSED=reject
    _rows: list[dict[str, Any]] = field(default_factory=list)
    _first: int = 0  # the index of the chunk's first row

    def __post_init__(self) -> None:
        self.allowed = frozenset(current_app.config["ALLOWED_SPECIAL_DOMAINS"])
        self.needed = self.head.needed()
        self.in_subject = self.head.used.get("subject", frozenset())
        self.domain = msgid_domain(self.head.draft.from_addr)
        self.subject = Subject(self.head.draft.subject, current_app.config["MAX_MESSAGE_BYTES"])

    @property
    def full(self) -> bool:
        """Whether checking should stop: too many errors to name."""
        return len(self.errors) >= MAX_ERRORS

    def add(self, item: Any) -> None:
        """Check one recipient; store it with its chunk, or note what is wrong with it."""
        index = self.count
        self.count += 1
        if self.count > MAX_RECIPIENTS:
            problem = f"must hold at most {MAX_RECIPIENTS} recipients a request"
            self.errors.append({"field": "recipients", "error": problem})
            return
        checked, faults = _checked(item, self.allowed)
        if not faults:
            faults = self._fields_faults(checked["fields"])
        if not faults and index % CHUNK_ROWS == 0:  # the templates tried once a chunk
            faults = self._render_faults(checked)
        self.errors += [{"index": index, "field": f, "error": e} for f, e in faults]
        if self.errors:
            self._rows.clear()  # nothing more is stored; the transaction is rolled back
            return
        self._rows.append(self._row(checked))
        if len(self._rows) >= CHUNK_ROWS:
            self.flush()

    def _fields_faults(self, fields: dict[str, Any]) -> list[tuple[str, str]]:
        faults = [(f"fields.{n}", "is used by the templates but not given")
                  for n in sorted(self.needed - fields.keys())]  # fmt: skip
        faults += [(f"fields.{n}", f"is used in the subject and {LINE_BREAK_ERROR}")
                   for n in sorted(self.in_subject)
                   if isinstance(fields.get(n), str) and LINE_BREAK.search(fields[n])]  # fmt: skip
        return faults

    def _render_faults(self, checked: dict[str, Any]) -> list[tuple[str, str]]:
        """The templates rendered with the values a worker will use: a stand-in token in
        the recipient's own shape, so that a branch on it is taken here as it is there."""
        entry = checked["entry"]
        values = {**checked["fields"], "email": entry.address, "name": entry.name}
        values["unsubscribe_token"] = unsubscribe.token(0, entry.address)
        limit = current_app.config["MAX_MESSAGE_BYTES"]
        try:
            texts = self.head.compiled.render(values, limit)
        except TemplateProblem as exc:
            return [(exc.field, exc.error)]
        attached = sum(len(upload.data) for upload in self.head.draft.attachments)
        problem = oversize(texts, attached, limit)
        return [("recipient", problem)] if problem else []

    def _row(self, checked: dict[str, Any]) -> dict[str, Any]:
        """A recipient's message row: the store's, with the body left to the mailing."""
        paused = {"next_attempt_at": PAUSED_UNTIL} if self.paused else {}
        entry = checked["entry"]
        values = {**checked["fields"], "email": entry.address, "name": entry.name}
        return message_row(
            self.head.draft, self.now, domain=self.domain, recipients=[entry],
            subject=self.subject.of(values), text_body=None, html_body=None, headers=None,
            max_attempts=self.max_attempts, source=f"mailing:{self.mailing_id}",
            attachment_count=self.head.attachment_count, mailing_id=self.mailing_id,
            fields=checked["fields"] or None, stream=Stream.BROADCAST.value, **paused,
        )  # fmt: skip

    def flush(self) -> None:
        """Insert the rows waiting, with their suppressed recipients marked (suppression.screen)."""
        rows, first = self._rows, self._first
        self._rows, self._first = [], self.count
        if not rows:
            return
        try:
            marked = screen.screen(rows, self.now, batch=True)
        except screen.Rejected as exc:
            self.rejected += [{**f, "index": f["index"] + first} for f in exc.found]
            return
        if self.rejected:
            return
        # Rows with a suppressed recipient one at a time, for the ids their events name.
        plain = [row for n, row in enumerate(rows) if n not in marked]
        if plain:
            insert_rows(plain)
        announced = []
        for n in marked:
            announced.append((insert_row(rows[n]), rows[n]))
        screen.announce(announced, self.now)
