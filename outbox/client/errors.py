"""The client's exceptions: one for each kind of answer the API refuses with."""

from dataclasses import dataclass
from typing import Any


class OutboxError(Exception):
    """The API refused a request, or could not be reached; status is None for the latter."""

    def __init__(self, error: str, status: int | None = None, body: dict[str, Any] | None = None):
        super().__init__(f"{status}: {error}" if status else error)
        self.error, self.status, self.body = error, status, body or {}


@dataclass(frozen=True)
class FieldError:
    """One bad field, and in a batch the index of the message that has it."""

    field: str
    error: str
    index: int | None = None

    def __str__(self) -> str:
        where = f"messages[{self.index}]." if self.index is not None else ""
        return f"{where}{self.field}: {self.error}"


class FieldErrors(OutboxError):
    """The message (or a message of a batch) has bad fields; errors names each (400, 422)."""

    def __init__(self, error: str, status: int, body: dict[str, Any]):
        self.errors = _field_errors(body.get("errors"))
        named = "; ".join(str(e) for e in self.errors)
        super().__init__(f"{error}: {named}" if named else error, status, body)
        self.error = error

    @property
    def fields(self) -> dict[str, str]:
        """Each bad field's error; in a batch, keyed "messages[i].field"."""
        return {
            (f"messages[{e.index}].{e.field}" if e.index is not None else e.field): e.error
            for e in self.errors
        }


class TooLarge(FieldErrors):
    """The message or the request is over the server's limit in bytes (413)."""

    @property
    def limit(self) -> int | None:
        return self.body.get("limit")


class AuthError(OutboxError):
    """The token is missing, unknown or revoked (401)."""


class Forbidden(AuthError):
    """The token lacks the scope this request needs (403); scope names it."""

    @property
    def scope(self) -> str | None:
        return self.body.get("scope")


class NotFound(OutboxError):
    """No such message (404)."""


class Conflict(OutboxError):
    """409: an Idempotency-Key reused for another message, or a move its status forbids.

    id is the message the key belongs to; status the message's status after a move refused.
    """

    @property
    def id(self) -> int | None:
        return self.body.get("id")

    @property
    def message_status(self) -> str | None:
        return self.body.get("status")


class Unavailable(OutboxError):
    """503 or no connection, after every retry: nothing is known to be queued.

    idempotency_key is the send's key: sent again under it, the message is queued if
    it was not, and the one queued is answered if it was.
    """

    idempotency_key: str | None = None


def _field_errors(errors: Any) -> list[FieldError]:
    if isinstance(errors, dict):  # one message: {field: error}
        return [FieldError(str(k), str(v)) for k, v in errors.items()]
    if isinstance(errors, list):  # a batch: [{index?, field, error}]
        return [
            FieldError(str(e.get("field")), str(e.get("error")), e.get("index"))
            for e in errors
            if isinstance(e, dict)
        ]
    return []


def from_answer(status: int, body: dict[str, Any]) -> OutboxError:
    """The exception for an API error answer (its status and JSON body)."""
    error = str(body.get("error") or f"the API answered {status}")
    if status == 413:
        return TooLarge(error, status, body)
    if "errors" in body and status in (400, 422):
        return FieldErrors(error, status, body)
    kinds: dict[int, type[OutboxError]] = {
        401: AuthError, 403: Forbidden, 404: NotFound, 409: Conflict, 503: Unavailable,
    }  # fmt: skip
    return kinds.get(status, OutboxError)(error, status, body)
