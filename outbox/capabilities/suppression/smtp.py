"""Suppressing from what the SMTP server said: a recipient refused as "no such user" (5.1.1).

Called by queue.outcomes.record for each group of outcomes, before it commits: it looks
only at the recipients the attempts refused, so a group without such a refusal costs no
query at all; one with some costs a read of their Message-IDs and the list's writes.
"""

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table, select

from outbox.capabilities.suppression import add, no_such_user
from outbox.capabilities.webhooks import events
from outbox.core.status import Status
from outbox.models import Message
from outbox.models.db import db

MESSAGES = cast(Table, Message.__table__)


def _refused(done: Any) -> list[tuple[str, int, str]]:
    """The recipients this attempt refused for good as unknown: address, code, reply."""
    attempt = done.claim.attempts + 1
    found = []
    for entry in done.recipients or ():
        code = entry.get("code")
        if not isinstance(code, int) or code < 500 or entry.get("state") not in (None, "failed"):
            continue
        if entry.get("attempts", attempt) != attempt:
            continue  # refused by an earlier attempt, and suppressed then
        if no_such_user(code, str(entry.get("reply") or "")):
            found.append((str(entry["address"]), code, str(entry.get("reply") or "")))
    return found


def suppress_refused(finished: Sequence[Any], recorded: Mapping[int, Status]) -> int:
    """Suppress the recipients of recorded outcomes refused as unknown, in the caller's
    transaction, with an event each; how many entries are new."""
    refused = {
        done.claim.id: hits
        for done in finished
        if done.claim.id in recorded and (hits := _refused(done))
    }
    if not refused:
        return 0
    stmt = select(MESSAGES.c.id, MESSAGES.c.message_id).where(MESSAGES.c.id.in_(refused))
    message_ids: dict[int, str] = {pk: mid for pk, mid in db.session.execute(stmt)}
    made = []
    for pk, hits in refused.items():
        for address, code, reply in hits:
            reason = f"{code} {reply}".strip()
            entry, new = add(address, reason, "smtp", message_pk=pk)
            if new:
                made.append(events.Event(events.SUPPRESSED, pk, message_ids[pk], address,
                                         code, reason, entry.created_at))  # fmt: skip
    if made:
        events.emit_many(made)
    return len(made)
