"""The message schema: what derives from it agrees with it, without a database."""

import dataclasses

from outbox import schema
from outbox.drafts import Draft


def test_each_field_of_the_schema_is_an_attribute_of_the_draft():
    # html before text: the check of text reads the checked html.
    assert list(schema.NewMessage.model_fields) == [
        "to", "cc", "bcc", "from_addr", "reply_to", "subject", "html", "text", "priority",
        "send_after", "headers", "attachments"]  # fmt: skip
    assert set(schema.NewMessage.model_fields) == {f.name for f in dataclasses.fields(Draft)}
    assert schema.WIRE_NAMES["from_addr"] == "from"
