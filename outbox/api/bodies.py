"""Reading a request's body: the content types taken, a message's fields and files, a batch."""

from typing import Any

from flask import request

from outbox.api.blueprint import Refused
from outbox.core import untrusted_json
from outbox.core.checks import Upload, check_inline, check_upload
from outbox.core.drafts import Draft, DraftError, build_draft
from outbox.core.schema import FORM_KINDS, WIRE_NAMES, unknown_field
from outbox.queue.wire import BATCH_LIMIT

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
# The fields a form repeats for several values, and those multipart sends files in.
REPEATED = [name for name, kind in FORM_KINDS.items() if kind == "repeated"]
FILES = [name for name, kind in FORM_KINDS.items() if kind == "files"]


def _looks_like_json() -> bool:
    """Whether a body not sent as JSON starts as a JSON object or list would.

    `curl -d '{...}'` sends JSON as a form: its first field's name then starts with "{".
    A multipart body is never read whole for this.
    """
    if request.mimetype == MULTIPART:
        return False
    if request.mimetype == FORM:
        first = next(iter(request.form), "")
        return first.lstrip()[:1] in ("{", "[")
    return request.get_data(cache=True).lstrip()[:1] in (b"{", b"[")


def check_content_type(accepted: tuple[str, ...]) -> None:
    """Refuse (415) a body of a type not accepted, or JSON sent as another type."""
    if request.is_json and JSON in accepted:
        return  # application/json with any parameters (charset), or a +json type
    form = request.mimetype in (FORM, MULTIPART) and request.mimetype in accepted
    if form and not _looks_like_json():
        return
    given = request.mimetype or "none"
    if _looks_like_json():
        problem = f"the body looks like JSON but its Content-Type is {given}; send {JSON}"
    else:
        problem = f"Content-Type {given} is not accepted"
    error = f"{problem}: this takes {', '.join(accepted)}"
    raise Refused(415, error, {"Accept": ", ".join(accepted)}, accepted=list(accepted))


def _json_object(what: str) -> dict[str, Any]:
    try:
        body = untrusted_json.loads(request.get_data(cache=True))
    except ValueError as exc:
        raise DraftError({"body": f"must be a JSON object{what}; it {exc}"}) from None
    if not isinstance(body, dict):
        raise DraftError({"body": f"must be a JSON object{what}"})
    return body


def _fields() -> dict[str, Any]:
    """The message fields of a JSON, form or multipart body, unknown names included."""
    if request.is_json:
        return _json_object("")
    form = request.form
    fields: dict[str, Any] = {name: form.get(name) for name in form if name not in REPEATED}
    for name in REPEATED:
        fields[name] = form.getlist(name)
    return fields


def _uploads() -> tuple[list[Upload], dict[str, str]]:
    """The checked files of a multipart body, and what is wrong with them.

    A file part's own Content-ID header makes it an inline part of the HTML (curl:
    `-F 'attachments=@logo.png;headers="Content-ID: <logo>"'`).
    """
    uploads: list[Upload] = []
    errors: dict[str, str] = {}
    for name in request.files:
        if name not in FILES:
            errors[name] = "takes no file" if name in WIRE_NAMES.values() else unknown_field(name)
            continue
        for item in request.files.getlist(name):
            filename, cid = item.filename or "", item.headers.get("Content-ID")
            try:
                uploads.append(check_upload(filename, item.content_type, item.read(), cid))
            except ValueError as exc:
                errors[name] = str(exc)
    try:
        check_inline(uploads)
    except ValueError as exc:
        errors.setdefault("attachments", str(exc))
    return uploads, errors


def read_draft(default_sender: str | None) -> Draft:
    """The request's message, with every bad field and upload named in one DraftError."""
    check_content_type((JSON, FORM, MULTIPART))
    fields = _fields()
    # Only multipart bodies carry files; asking a JSON request for them parses it as a form.
    uploads, errors = _uploads() if request.mimetype == MULTIPART else ([], {})
    try:
        draft = build_draft(fields, default_sender)
    except DraftError as exc:
        raise DraftError({**exc.errors, **errors}) from None
    if errors:
        raise DraftError(errors)
    draft.attachments.extend(uploads)
    return draft


def batch_items() -> list[Any]:
    """The messages list of a batch body, its length checked; Refused with errors if not."""
    check_content_type((JSON,))
    shape = 'must be a JSON object {"messages": [message, ...]}'
    try:
        body = _json_object(' {"messages": [message, ...]}')
    except DraftError as exc:
        errors = [{"field": "body", "error": exc.errors["body"]}]
        raise Refused(400, "the batch was not queued", errors=errors) from None
    items = body.get("messages")
    if not isinstance(items, list):
        raise Refused(400, "the batch was not queued", errors=[{"field": "body", "error": shape}])
    if unknown := sorted(set(body) - {"messages"}):
        errors = [{"field": name, "error": "is not a field of a batch"} for name in unknown]
        raise Refused(422, "the batch was not queued", errors=errors)
    if not 1 <= len(items) <= BATCH_LIMIT:
        problem = f"must hold 1 to {BATCH_LIMIT} messages; got {len(items)}"
        errors = [{"field": "messages", "error": problem}]
        raise Refused(413 if items else 422, f"messages {problem}", errors=errors)
    return items
