"""The client's shapes against the API's own declarations, so that neither drifts alone."""

import dataclasses

from outbox import client
from outbox.client import results
from outbox.core.schema import WIRE_NAMES
from outbox.queue import wire


def _names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _wire(model: type[wire.BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_an_email_can_give_every_field_of_a_message():
    every = client.Email(
        to="a@example.com", subject="s", text="t", html="h", sender="b@example.com",
        cc="c@example.com", bcc="d@example.com", reply_to="e@example.com",
        headers={"X-A": "1"}, priority=1, stream="broadcast", send_after="2030-01-01T00:00:00Z",
        attachments=[("f.txt", b"x")], metadata={"order": "42"},
    )  # fmt: skip
    assert set(every.to_json()) == set(WIRE_NAMES.values())


def test_the_results_hold_every_field_of_the_answers():
    assert (_names(results.Message) - {"note", "sender"}) | {"from"} == _wire(wire.Message)
    assert _names(results.MessageDetail) - _names(results.Message) == (
        _wire(wire.MessageDetail) - _wire(wire.Message)
    )
    assert _names(results.Recipient) == _wire(wire.Recipient)
    assert _names(results.AttemptInfo) == _wire(wire.AttemptInfo)
    assert _names(results.AttachmentInfo) == _wire(wire.AttachmentInfo)
    assert _wire(wire.Moved) - _wire(wire.Message) == {"note"}


def test_the_clients_batch_limit_is_the_apis():
    assert client.BATCH_LIMIT == wire.BATCH_LIMIT
