"""The staff pages' forms; Flask-WTF adds the CSRF token to each."""

from typing import Any

from flask_wtf import FlaskForm
from wtforms import (
    BooleanField,
    EmailField,
    Field,
    HiddenField,
    MultipleFileField,
    PasswordField,
    SelectField,
    StringField,
    TextAreaField,
)
from wtforms.validators import DataRequired

from outbox.core.schema import FORM_KINDS, NewMessage


class SignInForm(FlaskForm):
    email = EmailField("Email", validators=[DataRequired()])
    password = PasswordField("Password", validators=[DataRequired()])


class ComposeForm(FlaskForm):
    """The fields a form carries of schema.NewMessage, labelled with their titles.

    drafts.build_draft checks them, the same checks the API makes.
    """

    # Form field names that differ from the wire's: "from" is a Python keyword, which a
    # WTForms field cannot be named.
    FORM_NAMES = {"from": "sender"}
    # Labels that differ from the schema's titles: the form takes send_after in the
    # staff user's own time zone (compose.in_utc), not in UTC as the API does.
    LABELS = {"send_after": "Send after"}

    zone = HiddenField(default="UTC")
    edit = HiddenField()  # Edit and resend: the message this queues a corrected copy of
    # The suppressed recipients the page warned of, one a line: Send anyway queues to them.
    send_anyway = HiddenField()

    @classmethod
    def name_of(cls, wire_name: str) -> str:
        """The form field of a message field."""
        return cls.FORM_NAMES.get(wire_name, wire_name)


def _control(kind: str, shape: dict[str, Any], label: str) -> Field:
    """A text area for text that may span lines, files for attachments, a choice of the
    names a field takes (the schema checks the choice), a line otherwise."""
    default = shape.get("default")
    if kind == "files":
        return MultipleFileField(label)
    (value, *_) = [b for b in shape.get("anyOf", [shape]) if b.get("type") != "null"]
    if "enum" in value:
        return SelectField(label, choices=value["enum"], default=default, validate_choice=False)
    if value == {"type": "string"}:  # neither one line (pattern) nor a format
        return TextAreaField(label)
    return StringField(label, default=None if default is None else str(default))


def _add_message_fields() -> None:
    shapes = NewMessage.model_json_schema()["properties"]
    for name, kind in FORM_KINDS.items():
        label = ComposeForm.LABELS.get(name, shapes[name]["title"])
        setattr(ComposeForm, ComposeForm.name_of(name), _control(kind, shapes[name], label))


_add_message_fields()


class ActionForm(FlaskForm):
    """A button that changes a message: nothing but the CSRF token."""


class ResendAllForm(FlaskForm):
    confirm = BooleanField("Yes, queue every failed message again", validators=[DataRequired()])
