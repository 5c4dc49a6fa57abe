"""The message schema: what derives from it agrees with it, without a database."""

import dataclasses

import sqlalchemy as sa

from outbox import models
from outbox.core import schema
from outbox.core.drafts import Draft
from outbox.queue import wire
from outbox.web.forms import ComposeForm


def test_each_field_of_the_schema_is_an_attribute_of_the_draft():
    # html before text: the check of text reads the checked html.
    assert list(schema.NewMessage.model_fields) == [
        "to", "cc", "bcc", "from_addr", "reply_to", "subject", "html", "text", "priority",
        "stream", "send_after", "headers", "attachments", "metadata"]  # fmt: skip
    assert set(schema.NewMessage.model_fields) == {f.name for f in dataclasses.fields(Draft)}
    assert schema.WIRE_NAMES["from_addr"] == "from"


def test_forms_carry_every_field_but_the_headers():
    assert schema.FORM_KINDS == {
        "to": "repeated", "cc": "repeated", "bcc": "repeated", "from": "text",
        "reply_to": "text", "subject": "text", "html": "text", "text": "text",
        "priority": "text", "stream": "text", "send_after": "text",
        "attachments": "files"}  # fmt: skip


def test_the_compose_form_has_a_labelled_control_for_each_form_field():
    controls = {name: getattr(ComposeForm, name) for name in dir(ComposeForm)}
    controls = {name: c for name, c in controls.items() if hasattr(c, "_formfield")}
    # zone: the browser's time zone for Send after; edit: the message Edit and resend
    # corrects. Fields of the form, not of the message.
    fields = {ComposeForm.name_of(name) for name in schema.FORM_KINDS}
    assert set(controls) == fields | {"zone", "edit", "send_anyway"}
    for name, field in schema.NewMessage.model_fields.items():
        wire_name = schema.WIRE_NAMES[name]
        if wire_name in schema.FORM_KINDS:
            label = ComposeForm.LABELS.get(wire_name, field.title)  # the page's own words
            assert controls[ComposeForm.name_of(wire_name)].args == (label,)
    assert controls["priority"].kwargs["default"] == "0"
    assert controls["text"].field_class.__name__ == "TextAreaField"
    assert controls["subject"].field_class.__name__ == "StringField"


def test_an_answer_shows_columns_of_the_stored_message_or_its_recipients():
    columns = set(sa.inspect(models.Message).columns.keys())
    assert set(wire.Message.model_fields) <= columns | wire.ADDRESSES
    shown = [name for name, _, _ in wire._SHOWN]
    assert shown[:5] == ["id", "message_id", "status", "from", "to"]
    assert [name for name, _, is_time in wire._SHOWN if is_time] == [
        "created_at", "send_after", "next_attempt_at", "last_retry", "sent_at"]  # fmt: skip
