"""Inline parts: files the HTML shows by Content-ID (cid:, RFC 2392), handed over as JSON,
multipart, a batch, a mailing or by the Python client, sent by a worker to a real SMTP
server in multipart/related (RFC 2387) beside the attachments, and refused, naming the
problem, when their Content-ID is malformed or given twice."""

import base64
from email.message import EmailMessage

import pytest
from flask_mail import Message as MailMessage
from sqlalchemy import func, select

from outbox import queue
from outbox.auth import tokens
from outbox.client import Attachment, Email
from outbox.client.flask import to_email
from outbox.core.checks import Upload
from outbox.core.status import Status
from outbox.models import Message
from outbox.models.db import db
from outbox.web.shown import INLINE_SHOWN_BYTES, inline_images, with_inline
from outbox.worker import Tally, Worker
from tests.support import mailing_helpers
from tests.support.api import MESSAGES, auth
from tests.support.mailcheck import files, parsed

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # every byte value, CR and LF too
PDF = b"%PDF-1.7 invoice"
HTML = '<p>Hello</p><img src="cid:logo@shop.example" alt="Shop">'


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


def encoded(data: bytes) -> str:
    return base64.b64encode(data).decode()


def message(**fields: object) -> dict[str, object]:
    found: dict[str, object] = {
        "from": "shop@example.com", "to": "ann@example.com", "subject": "Your order",
        "text": "Hello", "html": HTML,
        "attachments": [
            {"filename": "invoice.pdf", "content": encoded(PDF)},
            {"filename": "logo.png", "content_type": "image/png", "content": encoded(PNG),
             "content_id": "<logo@shop.example>"},
        ],
    }  # fmt: skip
    found.update(fields)
    return found


def received(smtp) -> EmailMessage:  # type: ignore[no-untyped-def]
    (mail,) = smtp.received
    return parsed(mail.content)


def stored() -> int:
    found = db.session.scalar(select(func.count()).select_from(Message)) or 0
    db.session.commit()
    return found


@pytest.mark.all_databases
def test_an_inline_part_goes_beside_the_html_and_the_attachment_in_mixed(smtp_app, smtp, token):
    client = smtp_app.test_client()
    answer = client.post(MESSAGES, json=message(), headers=auth(token))
    assert answer.status_code == 201, answer.get_json()
    message_id = answer.get_json()["id"]
    assert Worker().drain() == Tally(sent=1)

    mail = received(smtp)
    assert mail.get_content_type() == "multipart/mixed"
    related, attachment = mail.iter_parts()
    assert related.get_content_type() == "multipart/related"
    assert related.get_param("type") == "multipart/alternative"
    alternative, image = related.iter_parts()
    assert [p.get_content_type() for p in alternative.iter_parts()] == ["text/plain", "text/html"]
    assert mail.get_body(("html",)).get_content() == HTML
    assert image["Content-ID"] == "<logo@shop.example>"
    assert image.get_content_disposition() == "inline"
    assert (image.get_filename(), image.get_payload(decode=True)) == ("logo.png", PNG)
    assert attachment.get_content_disposition() == "attachment"
    assert attachment["Content-ID"] is None
    assert attachment.get_payload(decode=True) == PDF

    shown = client.get(f"{MESSAGES}/{message_id}", headers=auth(token)).get_json()
    assert [(a["filename"], a["content_id"]) for a in shown["attachments"]] == [
        ("invoice.pdf", None), ("logo.png", "logo@shop.example")]  # fmt: skip


def sent_alone(smtp_app, smtp, token: str, content_id: str, **fields: object) -> EmailMessage:  # type: ignore[no-untyped-def]
    """The mail of a message with one file, the logo with content_id, as the server got it."""
    inline = {"filename": "logo.png", "content": encoded(PNG), "content_id": content_id}
    body = message(attachments=[inline], **fields)
    answer = smtp_app.test_client().post(MESSAGES, json=body, headers=auth(token))
    assert answer.status_code == 201, answer.get_json()
    assert Worker().drain() == Tally(sent=1)
    return received(smtp)


def test_html_alone_is_the_root_of_related_and_no_mixed_is_made(smtp_app, smtp, token):
    mail = sent_alone(smtp_app, smtp, token, "logo@shop.example", text=None)
    assert mail.get_content_type() == "multipart/related"
    assert mail.get_param("type") == "text/html"
    root, image = mail.iter_parts()
    assert root.get_content_type() == "text/html" and root.get_content() == HTML
    assert image["Content-ID"] == "<logo@shop.example>"
    assert image.get_payload(decode=True) == PNG


def test_a_content_id_without_html_goes_as_an_inline_attachment(smtp_app, smtp, token):
    mail = sent_alone(smtp_app, smtp, token, "logo", html=None)
    assert mail.get_content_type() == "multipart/mixed"
    assert [p.get_content_type() for p in mail.walk()] == [
        "multipart/mixed", "text/plain", "image/png"]  # fmt: skip
    assert files(mail) == [("logo.png", "image/png", PNG, "logo")]


def form_data(client, token: str, parts: list[bytes]):  # type: ignore[no-untyped-def]
    """POST parts (each its headers, a blank line and its content) as multipart/form-data."""
    mark = "----outbox-test-boundary"
    data = b"".join(f"--{mark}\r\n".encode() + part + b"\r\n" for part in parts)
    return client.post(MESSAGES, data=data + f"--{mark}--\r\n".encode(), headers=auth(token),
                       content_type=f"multipart/form-data; boundary={mark}")  # fmt: skip


def test_a_multipart_file_part_is_inline_by_its_own_content_id_header(client, token):
    # As curl -F 'attachments=@logo.png;headers="Content-ID: <logo@shop.example>"' sends it.
    parts = [
        b'Content-Disposition: form-data; name="from"\r\n\r\nshop@example.com',
        b'Content-Disposition: form-data; name="to"\r\n\r\nann@example.com',
        b'Content-Disposition: form-data; name="html"\r\n\r\n' + HTML.encode(),
        b'Content-Disposition: form-data; name="attachments"; filename="logo.png"\r\n'
        b"Content-Type: image/png\r\nContent-ID: <logo@shop.example>\r\n\r\n" + PNG,
        b'Content-Disposition: form-data; name="attachments"; filename="invoice.pdf"\r\n'
        b"Content-Type: application/pdf\r\n\r\n" + PDF,
    ]
    answer = form_data(client, token, parts)
    assert answer.status_code == 201, answer.get_json()
    assert queue.read_attachments(answer.get_json()["id"]) == [
        Upload("logo.png", "image/png", PNG, "logo@shop.example"),
        Upload("invoice.pdf", "application/pdf", PDF),
    ]


@pytest.mark.parametrize(
    ("attachments", "problem"),
    [
        ([{"filename": "a.png", "content": "", "content_id": "my logo"}], "content_id 'my logo'"),
        ([{"filename": "a.png", "content": "", "content_id": "x" * 251}], "1 to 250"),
        (
            [{"filename": "a.png", "content": "", "content_id": "<a\r\nBcc: x@evil.example>"}],
            "content_id",
        ),
        ([{"filename": "a.png", "content": "", "content_id": 7}], "content_id must be a string"),
        (
            [
                {"filename": "a.png", "content": "", "content_id": "Logo"},
                {"filename": "b.png", "content": "", "content_id": "<logo>"},
            ],
            "content_id 'logo' is given to two attachments",
        ),
        (
            [{"filename": "a.png", "content": "", "disposition": "inline"}],
            "disposition is not a key of an attachment",
        ),
    ],
)
def test_a_bad_content_id_is_refused_naming_it_and_nothing_is_stored(
    client, token, attachments, problem
):
    answer = client.post(MESSAGES, json=message(attachments=attachments), headers=auth(token))
    assert answer.status_code == 422
    errors = answer.get_json()["errors"]
    assert problem in errors["attachments"], errors
    assert stored() == 0


def test_a_multipart_content_id_given_twice_is_refused(client, token):
    part = (b'Content-Disposition: form-data; name="attachments"; filename="%d.png"\r\n'
            b"Content-Type: image/png\r\nContent-ID: <logo>\r\n\r\nPNG")  # fmt: skip
    parts = [b'Content-Disposition: form-data; name="to"\r\n\r\nann@example.com',
             b'Content-Disposition: form-data; name="html"\r\n\r\n<p>x</p>',
             part % 1, part % 2]  # fmt: skip
    answer = form_data(client, token, parts)
    assert answer.status_code == 422
    errors = answer.get_json()["errors"]
    assert "given to two attachments" in errors["attachments"]
    assert stored() == 0


@pytest.mark.all_databases
def test_a_batch_and_send_again_keep_each_content_id(smtp_app, smtp, token):
    client = smtp_app.test_client()
    answer = client.post(f"{MESSAGES}/batch", json={"messages": [message(), message()]},
                         headers=auth(token))  # fmt: skip
    assert answer.status_code == 201, answer.get_json()
    first = answer.get_json()["messages"][0]["id"]
    assert Worker().drain() == Tally(sent=2)
    copy = queue.send_again(first, "staff:test", 3)
    assert [(a.filename, a.content_id) for a in queue.read_attachments(copy.id)] == [
        ("invoice.pdf", None), ("logo.png", "logo@shop.example")]  # fmt: skip
    assert Worker().drain() == Tally(sent=1)
    again = parsed(smtp.received[-1].content)
    assert files(again) == [("logo.png", "image/png", PNG, "logo@shop.example"),
                            ("invoice.pdf", "application/pdf", PDF, None)]  # fmt: skip


@pytest.mark.all_databases
def test_a_mailings_inline_part_is_stored_once_and_goes_with_each_recipients_mail(
    smtp_app, smtp, token
):
    client = smtp_app.test_client()
    inline = {"filename": "logo.png", "content": encoded(PNG), "content_id": "logo@shop.example"}
    body = mailing_helpers.body(html='<p>Hi {{ first }}</p><img src="cid:logo@shop.example">',
                                attachments=[inline])  # fmt: skip
    answer = mailing_helpers.post(client, token, body)
    assert answer.status_code == 201, answer.get_json()
    assert Worker().drain() == Tally(sent=2)
    for got in smtp.received:
        mail = parsed(got.content)
        assert mail.get_content_type() == "multipart/related"
        assert files(mail) == [("logo.png", "image/png", PNG, "logo@shop.example")]
        assert mail.get_body(("html",)).get_content().startswith("<p>Hi ")
    rows = mailing_helpers.rows_of(answer.get_json()["id"])
    assert {row.status for row in rows} == {Status.SENT.value}


def test_the_client_and_flask_mail_hand_over_a_content_id():
    logo = Attachment("logo.png", PNG, "image/png", "logo@shop.example")
    mine = Email(to="ann@example.com", html=HTML, attachments=[logo])
    assert mine.to_json()["attachments"] == [{
        "filename": "logo.png", "content_type": "image/png", "content": encoded(PNG),
        "content_id": "logo@shop.example"}]  # fmt: skip
    assert "content_id" not in Email(to="a@example.com", attachments=[("a.txt", "x")]).to_json()[
        "attachments"][0]  # fmt: skip

    flask_mail_message = MailMessage("Hi", sender="shop@example.com", recipients=["a@example.com"],
                                     html=HTML)  # fmt: skip
    flask_mail_message.attach("logo.png", "image/png", PNG, "inline",
                              headers={"Content-ID": "<logo@shop.example>"})  # fmt: skip
    flask_mail_message.attach("invoice.pdf", "application/pdf", PDF)
    sent = to_email(flask_mail_message).to_json()
    assert [(a["filename"], a.get("content_id")) for a in sent["attachments"]] == [
        ("logo.png", "logo@shop.example"), ("invoice.pdf", None)]  # fmt: skip


# ---- the message page's HTML body shows the inline images (as data: URLs) ----


def test_cid_urls_become_data_urls_of_raster_images_only():
    svg = Upload("x.svg", "image/svg+xml", b"<svg onload=alert(1)>", "drawing")
    big = Upload("big.png", "image/png", b"x" * (INLINE_SHOWN_BYTES + 1), "big")
    images = inline_images([Upload("logo.png", "image/png", PNG, "Logo@Shop.Example"), svg, big])
    assert list(images) == ["logo@shop.example"]
    url = f"data:image/png;base64,{encoded(PNG)}"
    html = ('<img src="cid:logo@shop.example"><img src=CID:logo%40shop.example>'
            '<td style="background: url(cid:logo@shop.example)">'
            '<img src="cid:drawing"><img src="cid:gone"><p>see cid:logo@shop.example</p>'
            "<img src = 'cid:logo@shop.example'>")  # fmt: skip
    assert with_inline(html, images) == (
        f'<img src="{url}"><img src={url}><td style="background: url({url})">'
        '<img src="cid:drawing"><img src="cid:gone"><p>see cid:logo@shop.example</p>'
        f"<img src = '{url}'>"
    )


@pytest.mark.all_databases
def test_the_html_body_page_shows_a_messages_and_a_mailings_inline_images(client, signed_in, token):
    url = f"data:image/png;base64,{encoded(PNG)}"
    message_id = client.post(MESSAGES, json=message(), headers=auth(token)).get_json()["id"]
    shown = signed_in.get(f"/messages/{message_id}/body.html")
    assert shown.get_data(as_text=True) == HTML.replace("cid:logo@shop.example", url)
    assert "img-src data:" in shown.headers["Content-Security-Policy"]
    page = signed_in.get(f"/messages/{message_id}").get_data(as_text=True)
    assert "inline in the HTML as <code>cid:logo@shop.example</code>" in page

    inline = {"filename": "logo.png", "content": encoded(PNG), "content_id": "logo"}
    body = mailing_helpers.body(html='<p>{{ first }}</p><img src="cid:logo">', attachments=[inline])
    mailing_id = mailing_helpers.post(client, token, body).get_json()["id"]
    ann, _ = mailing_helpers.rows_of(mailing_id)
    shown = signed_in.get(f"/messages/{ann.id}/body.html")
    assert shown.get_data(as_text=True) == f'<p>Ann</p><img src="{url}">'
