"""The compose page: the form, its send-after time in the staff user's zone, its errors, its
warning before a message goes to a suppressed address, and Edit and resend: a failed or
cancelled message opened as a new draft with its content."""

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flask import abort, current_app, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user
from werkzeug.datastructures import FileStorage

from outbox import queue
from outbox.auth import audit
from outbox.capabilities import suppression
from outbox.core.addresses import parse
from outbox.core.checks import Upload, check_upload, oversize
from outbox.core.drafts import Draft, DraftError, build_draft
from outbox.core.kinds import MessageKind, kind_of
from outbox.core.schema import FORM_KINDS
from outbox.core.streams import DEFAULT as DEFAULT_STREAM
from outbox.core.streams import Stream
from outbox.models import ID_RANGE, Message, Suppression
from outbox.ops import detail, metrics
from outbox.web.forms import ComposeForm

FILES = [name for name, kind in FORM_KINDS.items() if kind == "files"]  # the uploads
# The form's zone field holds the browser's IANA zone (live.js fills it in), or UTC when
# scripts are off. No IANA zone name is longer than this.
ZONE_CHARS = 64
# The fields folded behind "More options"; the fold opens when one has a value or an error.
MORE = ("cc", "bcc", "reply_to", "priority", "stream", "send_after")
# What Edit and resend opens: a message that reached no one, written from its columns (a
# mailing's recipient comes from its mailing, a submitted mail is sent as it came).
EDITABLE = ("failed", "cancelled")
# A suppression's source as the compose page's warning says it.
SOURCE_WORDS = {"bounce": "hard bounce", "complaint": "spam complaint",
                "smtp": "refused by its mail server", "manual": "added by staff",
                "import": "imported", "unsubscribe": "unsubscribed"}  # fmt: skip


def editable(message: Message) -> bool:
    """Whether the message can be opened as a new draft (its page shows the button)."""
    return message.status in EDITABLE and kind_of(message) is MessageKind.PLAIN


def _original(pk: str | None) -> Message | None:
    """The message the form edits a copy of: None for a new one; 404 or 409 if it cannot be."""
    if not pk:
        return None
    found = detail.message(int(pk)) if pk.isdigit() and int(pk) in ID_RANGE else None
    if found is None:
        abort(404)
    if not editable(found):
        abort(409, description=f"Message {found.id} is {found.status}: only a failed or "
              "cancelled message written here or by the API opens as a draft.")  # fmt: skip
    return found


def _fill(form: ComposeForm, original: Message) -> None:
    """The form holding the original's content, as a person would type it."""
    draft = queue.draft_of(original)
    typed = {"from": str(draft.from_addr), "to": ", ".join(map(str, draft.to)),
             "cc": ", ".join(map(str, draft.cc)), "bcc": ", ".join(map(str, draft.bcc)),
             "reply_to": str(draft.reply_to or ""), "subject": draft.subject,
             "text": draft.text or "", "html": draft.html or "",
             "priority": str(draft.priority), "stream": draft.stream.value}  # fmt: skip
    for name, value in typed.items():
        form[ComposeForm.name_of(name)].data = value
    form.edit.data = str(original.id)


def _carried(draft: Draft, original: Message) -> Draft:
    """The edited draft with what the form does not show: the original's headers, labels
    and attachments (files chosen now come on top)."""
    kept = queue.draft_of(original)
    draft.headers = {**kept.headers, **draft.headers}
    draft.metadata = {**kept.metadata, **draft.metadata}
    draft.attachments[:0] = kept.attachments
    limit = current_app.config["MAX_MESSAGE_BYTES"]
    if (size := draft.size()) > limit:
        raise DraftError({"attachments": oversize(limit, size)})
    return draft


def zone_named(name: str | None) -> ZoneInfo:
    """The IANA zone of that name; ValueError names an unknown one."""
    name = (name or "").strip() or "UTC"
    try:
        if len(name) > ZONE_CHARS:
            raise ValueError
        return ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError):
        raise ValueError(f"{name[:ZONE_CHARS]!r} is not a time zone this server knows") from None


def in_utc(typed: str | None, zone: ZoneInfo) -> str | None:
    """A wall-clock time typed in zone as the ISO UTC time the schema takes.

    A time the clocks skip (the spring-forward gap) does not exist there: an error.
    A time they pass twice (the autumn overlap) is taken at its first occurrence, the
    earlier instant (fold=0), so that a message is never held back an extra hour.
    Anything not a date and time goes to the schema as typed, for its error text.
    """
    if typed is None or not typed.strip():
        return None
    try:
        wall = datetime.fromisoformat(typed.strip())
    except ValueError:
        return typed
    if wall.tzinfo is not None:  # an explicit offset says which instant it is
        return typed
    moment = wall.replace(tzinfo=zone)
    if moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != wall:
        raise ValueError(
            f"{wall:%Y-%m-%d %H:%M} does not exist in {zone.key}: the clocks skip it "
            "(daylight saving time begins); choose a later time"
        )
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat() + "+00:00"


def _draft_fields(form: ComposeForm) -> dict[str, Any]:
    """The message's fields as the form holds them, by their names on the wire."""
    return {
        name: form[ComposeForm.name_of(name)].data
        for name, kind in FORM_KINDS.items()
        if kind != "files"
    }


def _chosen() -> list[FileStorage]:
    """The files chosen in the form's file fields."""
    found: list[FileStorage] = []
    for name in FILES:
        found.extend(f for f in request.files.getlist(ComposeForm.name_of(name)) if f.filename)
    return found


def why_suppressed(entry: Suppression, zone: ZoneInfo) -> str:
    """Why an address is kept from mail, in a staff member's words: "hard bounce on 3 Nov
    2026: 550 5.1.1 no such user"."""
    day = entry.created_at.replace(tzinfo=UTC).astimezone(zone)
    said = f"{SOURCE_WORDS.get(entry.source, entry.source)} on {day.day} {day:%b %Y}"
    return f"{said}: {entry.reason}" if entry.reason else said


def _kept(addresses: list[str], stream: str, zone_name: str | None) -> list[tuple[str, str]]:
    """(address, why) for each of these addresses the list keeps mail of stream from."""
    found = suppression.keeping(addresses, stream)
    try:
        zone = zone_named(zone_name)
    except ValueError:
        zone = ZoneInfo("UTC")
    return [(address, why_suppressed(entry, zone)) for address, entry in found.items()]


def typed_check() -> ResponseReturnValue:
    """As an address field loses focus (htmx): the typed To, Cc and Bcc addresses the list
    keeps the message from, named beside the form before it is sent. Nothing while they
    cannot be read: the submit names that fault."""
    typed = [request.args.get(name, "") for name in ("to", "cc", "bcc")]
    stream = request.args.get("stream", "")
    if stream not in {s.value for s in Stream}:
        stream = DEFAULT_STREAM.value
    try:
        boxes = parse(typed, frozenset(current_app.config["ALLOWED_SPECIAL_DOMAINS"]))
    except ValueError:
        boxes = []
    kept = _kept([box.address for box in boxes], stream, request.args.get("zone"))
    return render_template("messages/_compose_suppressed.html", kept=kept)


def _warnings(draft: Draft, form: ComposeForm) -> list[tuple[str, str]]:
    """(address, why) for each recipient the suppression list keeps this mail from, unless
    the person was warned of each (the form's send_anyway field lists those). None with
    OUTBOX_SUPPRESSED=reject: the queue refuses the message, naming them, instead."""
    if current_app.config["SUPPRESSED"] == "reject":
        return []
    # A browser posts the field's line breaks as CRLF.
    warned = set(filter(None, (form.send_anyway.data or "").splitlines()))
    addresses = [r.address for r in (*draft.to, *draft.cc, *draft.bcc)]
    kept = _kept(addresses, draft.stream.value, form.zone.data)
    return kept if {address for address, _ in kept} - warned else []


def _page(
    form: ComposeForm, status: int, dropped: list[str] | None = None,
    original: Message | None = None, warnings: list[tuple[str, str]] | None = None,
) -> ResponseReturnValue:  # fmt: skip
    """The form as typed; dropped names the files to choose again after an error or a
    warning; warnings the suppressed recipients, with Send anyway."""
    folded = [form[ComposeForm.name_of(name)] for name in MORE]
    more_open = any(f.errors or f.data not in (None, "", f.default) for f in folded)
    try:
        zone = zone_named(form.zone.data).key
    except ValueError:
        zone = "UTC"
    carried = detail.attachments(original.id) if original is not None else []
    if warnings:
        form.send_anyway.data = "\n".join(address for address, _ in warnings)
    return render_template("messages/new.html", form=form, more_open=more_open, zone=zone,
                           dropped=dropped or [], original=original, carried=carried,
                           warnings=warnings or []), status  # fmt: skip


def _checked(form: ComposeForm, files: list[FileStorage]) -> Draft:
    """The draft of the form, or DraftError naming every bad field at once."""
    errors: dict[str, str] = {}
    fields = _draft_fields(form)
    try:
        if fields["send_after"]:
            fields["send_after"] = in_utc(fields["send_after"], zone_named(form.zone.data))
    except ValueError as exc:
        errors["send_after"], fields["send_after"] = str(exc), None
    uploads: list[Upload] = []
    try:
        uploads = [check_upload(f.filename or "", f.content_type, f.read()) for f in files]
    except ValueError as exc:
        errors["attachments"] = str(exc)
    try:
        draft = build_draft(fields, current_app.config["MAIL_DEFAULT_SENDER"])
    except DraftError as exc:
        raise DraftError({**exc.errors, **errors}) from None
    if errors:
        raise DraftError(errors)
    draft.attachments.extend(uploads)
    limit = current_app.config["MAX_MESSAGE_BYTES"]
    if (size := draft.size()) > limit:
        raise DraftError({"attachments": oversize(limit, size)})
    return draft


def compose() -> ResponseReturnValue:
    """Show the form; on POST queue the message, or show the form again as it was typed.

    Chosen files are not kept after an error (a browser cannot fill a file field again):
    the page names them so they can be chosen again. Keeping them would mean a second
    store of unsent uploads beside the queue, with its own limits and expiry.

    A recipient on the suppression list for the message's stream holds the first submit:
    the form comes back naming each and why, with Send anyway. Sent anyway, the message
    is queued and those recipients are marked suppressed as the queue marks any.
    """
    form = ComposeForm()
    original = _original(request.values.get("edit"))
    if request.method == "GET":
        if original is not None:
            _fill(form, original)
        else:
            form[ComposeForm.name_of("from")].data = current_app.config["MAIL_DEFAULT_SENDER"] or ""
    if not form.validate_on_submit():
        return _page(form, 422 if request.method == "POST" else 200, original=original)
    files = _chosen()
    try:
        draft = _checked(form, files)
        if original is not None:
            draft = _carried(draft, original)
    except DraftError as exc:
        for name, problem in exc.errors.items():
            field = form[ComposeForm.name_of(name)] if name in FORM_KINDS else form.to
            field.errors = [*field.errors, problem]
        return _page(form, 422, [f.filename or "" for f in files], original)
    if warnings := _warnings(draft, form):
        # 200, as any page that asks first answers (confirm.confirm_page).
        return _page(form, 200, [f.filename or "" for f in files], original, warnings)
    message, _ = queue.enqueue(draft, source=f"web:{current_user.email}",
                               max_attempts=current_app.config["MAX_ATTEMPTS"],
                               resent_from=original.id if original else None)  # fmt: skip
    audit.record("compose", message.id, {"edited": original.id} if original else None)
    metrics.count_enqueued("compose", streams={draft.stream.value: 1})
    return redirect(url_for("messages.show", message_pk=message.id))
