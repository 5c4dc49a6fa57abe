"""The staff pages' forms; Flask-WTF adds the CSRF token to each."""

from flask_wtf import FlaskForm
from wtforms import (
    BooleanField,
    EmailField,
    MultipleFileField,
    PasswordField,
    StringField,
    TextAreaField,
)
from wtforms.validators import DataRequired


class SignInForm(FlaskForm):
    email = EmailField("Email", validators=[DataRequired()])
    password = PasswordField("Password", validators=[DataRequired()])


class ComposeForm(FlaskForm):
    """Every field is checked by drafts.build_draft, the same checks the API makes."""

    sender = StringField("From")
    to = StringField("To")
    cc = StringField("Cc")
    bcc = StringField("Bcc")
    reply_to = StringField("Reply-To")
    subject = StringField("Subject")
    text = TextAreaField("Text body")
    html = TextAreaField("HTML body")
    priority = StringField("Priority", default="0")
    send_after = StringField("Send after (UTC)")
    attachments = MultipleFileField("Attachments")

    # Draft field names that differ from the form's.
    DRAFT_NAMES = {"from": "sender"}


class ActionForm(FlaskForm):
    """A button that changes a message: nothing but the CSRF token."""


class ResendAllForm(FlaskForm):
    confirm = BooleanField("Yes, queue every failed message again", validators=[DataRequired()])
