"""A mailing's own fields (everything but its recipients), checked as a message's are."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask import current_app

from outbox.capabilities.mailings.templates import (
    Compiled,
    TemplateProblem,
    compile_templates,
    variables,
)
from outbox.core.addresses import Mailbox
from outbox.core.drafts import Draft, DraftError, build_draft
from outbox.core.schema import WIRE_NAMES
from outbox.models import Mailing

# The fields of a mailing request besides recipients; all but unsubscribe_url are a
# message's (schema.NewMessage), checked by the same schema.
FIELDS = ("from", "reply_to", "subject", "text", "html", "headers", "attachments",
          "priority", "send_after", "unsubscribe_url")  # fmt: skip
URL_CHARS = 2000
STAND_IN = "recipient@outbox.invalid"


class Invalid(Exception):
    """Fields of a mailing that are wrong: errors lists {"field", "error"} (and "index")."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{e['field']}: {e['error']}" for e in errors))
        self.errors = errors


@dataclass(frozen=True)
class Head:
    """A mailing's checked fields: the message part as a Draft without recipients, and its
    templates compiled, with the recipient fields each one uses."""

    draft: Draft
    unsubscribe_url: str | None
    compiled: Compiled
    used: dict[str, frozenset[str]]  # by template field
    attachment_count: int

    def needed(self) -> frozenset[str]:
        """Every recipient field some template uses."""
        return frozenset().union(*self.used.values())


def _unsubscribe_url(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > URL_CHARS:
        raise ValueError(f"must be a string of at most {URL_CHARS} characters")
    if not value.startswith("https://"):
        raise ValueError("must be an https:// URL (RFC 8058), a template like the subject")
    return value


def check(fields: Mapping[str, Any], default_sender: str | None) -> Head:
    """The checked head of a mailing; Invalid naming every bad field and template line."""
    errors = [{"field": name, "error": "is not a field of a mailing"}
              for name in fields if name not in FIELDS]  # fmt: skip
    # The message's checks need a recipient: one from a domain nobody can send to stands in.
    message = {k: v for k, v in fields.items() if k in FIELDS and k in WIRE_NAMES.values()}
    message["to"] = [STAND_IN]
    allowed = {*current_app.config["ALLOWED_SPECIAL_DOMAINS"], "invalid"}
    draft = None
    try:
        draft = build_draft(message, default_sender, allowed)
    except DraftError as exc:
        errors += [{"field": k, "error": v} for k, v in exc.errors.items()]
    unsubscribe_url = None
    try:
        unsubscribe_url = _unsubscribe_url(fields.get("unsubscribe_url"))
    except ValueError as exc:
        errors.append({"field": "unsubscribe_url", "error": str(exc)})
    sources = {"subject": fields.get("subject"), "text": fields.get("text"),
               "html": fields.get("html"), "unsubscribe_url": unsubscribe_url}  # fmt: skip
    sources = {k: v for k, v in sources.items() if isinstance(v, str) and v}
    used: dict[str, frozenset[str]] = {}
    for name, source in sources.items():
        try:
            used.update(variables({name: source}))
        except TemplateProblem as exc:
            errors.append({"field": exc.field, "error": exc.error})
    if errors or draft is None:
        raise Invalid(errors)
    compiled = compile_templates(sources)
    return Head(draft, unsubscribe_url, compiled, used, len(draft.attachments))


def of_mailing(mailing: Mailing) -> Head:
    """The head of a stored mailing, for appending recipients to it."""
    draft = Draft(
        from_addr=Mailbox(mailing.from_addr, mailing.from_name), to=[],
        reply_to=Mailbox(mailing.reply_to, mailing.reply_to_name) if mailing.reply_to else None,
        subject=mailing.subject, text=mailing.text_body, html=mailing.html_body,
        headers=mailing.headers or {}, priority=mailing.priority, send_after=mailing.send_after,
    )  # fmt: skip
    sources = sources_of(mailing)
    used = variables(sources)
    return Head(draft, mailing.unsubscribe_url, compile_templates(sources), used,
                mailing.attachment_count)  # fmt: skip


def sources_of(mailing: Mailing) -> dict[str, str]:
    """A stored mailing's templates, by field, those it has."""
    found = {"subject": mailing.subject, "text": mailing.text_body,
             "html": mailing.html_body, "unsubscribe_url": mailing.unsubscribe_url}  # fmt: skip
    return {k: v for k, v in found.items() if v}
