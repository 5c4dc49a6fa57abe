"""Mailings through a real worker into a real SMTP server: each recipient's own mail,
List-Unsubscribe, and the one-click unsubscribe that suppresses the address."""

import base64
import re
from email import message_from_bytes, policy

import pytest
from sqlalchemy import func, select

from outbox import queue
from outbox.auth import tokens
from outbox.capabilities.mailings import unsubscribe
from outbox.models import Attachment, MailingAttachment, Suppression
from outbox.models.db import db
from outbox.worker import Tally, Worker
from tests.support.dkimkeys import add_key, tags, verifies
from tests.support.mailing_helpers import body, post, rows_of


@pytest.fixture
def token(app) -> str:  # type: ignore[no-untyped-def]
    return tokens.create("shop")


def by_recipient(smtp) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return {r.rcpt_tos[0]: message_from_bytes(r.content, policy=policy.default)
            for r in smtp.received}  # fmt: skip


@pytest.mark.all_databases
def test_a_worker_renders_each_recipients_own_mail(smtp_app, smtp, client, token):
    payload = body(html="<p>{{ first }} &amp; {{ plan }}</p>", headers={"X-Campaign": "nov"})
    payload["recipients"][1]["fields"]["first"] = "<Bob>"
    answer = post(client, token, payload).get_json()
    assert Worker().drain() == Tally(sent=2)
    mails = by_recipient(smtp)
    ann, bob = mails["ann@example.com"], mails["bob@example.net"]
    assert ann["Subject"] == "Hello Ann" and bob["Subject"] == "Hello <Bob>"
    assert ann["To"] == "Ann <ann@example.com>" and ann["X-Campaign"] == "nov"
    assert ann["From"] == "News <news@example.com>"
    assert ann.get_body(("plain",)).get_content().strip() == "Dear Ann, your plan is gold."
    assert bob.get_body(("html",)).get_content().strip() == "<p>&lt;Bob&gt; &amp; tin</p>"
    assert "List-Unsubscribe" not in ann  # no URL configured
    rows = rows_of(answer["id"])
    assert [r.status for r in rows] == ["sent", "sent"]
    assert {r.message_id for r in rows} == {m["Message-ID"] for m in mails.values()}


@pytest.mark.all_databases
def test_mailing_mails_carry_one_click_unsubscribe_that_suppresses_the_address(
    smtp_app, smtp, client, token
):
    smtp_app.config["UNSUBSCRIBE_URL"] = "https://outbox.example.com/"
    post(client, token, body())
    assert Worker().drain() == Tally(sent=2)
    ann = by_recipient(smtp)["ann@example.com"]
    assert ann["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    (url,) = re.findall(r"<(https://outbox\.example\.com/unsubscribe/[^>]+)>",
                        ann["List-Unsubscribe"])  # fmt: skip
    path = url.removeprefix("https://outbox.example.com")
    page = client.get(path)
    assert page.status_code == 200 and b"ann@example.com" in page.data
    assert db.session.scalars(select(Suppression)).all() == []  # a GET changes nothing
    for _ in range(2):  # a mail provider's one-click POST, twice: the same answer
        done = client.post(path, data={"List-Unsubscribe": "One-Click"})
        assert done.status_code == 200 and done.data == b"unsubscribed\n"
    (entry,) = db.session.scalars(select(Suppression)).all()
    assert (entry.address, entry.reason, entry.source) == ("ann@example.com", "unsubscribed",
                                                           "unsubscribe")  # fmt: skip
    assert client.post(path[:-3] + "xyz").status_code == 404  # a token not signed here


def test_a_per_mailing_unsubscribe_template_is_rendered_per_recipient(smtp_app, smtp, client,
                                                                      token):  # fmt: skip
    smtp_app.config["UNSUBSCRIBE_URL"] = "https://outbox.example.com"
    url = "https://shop.example/u?e={{ email|urlencode }}&t={{ unsubscribe_token }}"
    post(client, token, body(unsubscribe_url=url))
    Worker().drain()
    ann = by_recipient(smtp)["ann@example.com"]
    link = ann["List-Unsubscribe"]
    assert link.startswith("<https://shop.example/u?e=ann%40example.com&t=")
    token_given = link.split("&t=")[1].rstrip(">")
    assert unsubscribe._signer().loads(token_given)[1] == "ann@example.com"


def test_a_recipient_whose_rendering_fails_fails_alone(smtp_app, smtp, client, token):
    # Checked at creation on the first recipient only: the second's value breaks the template.
    payload = body(text="{{ 10 // count }} items")
    payload["recipients"][0]["fields"]["count"] = 2
    payload["recipients"][1]["fields"]["count"] = 0
    answer = post(client, token, payload).get_json()
    assert Worker().drain() == Tally(sent=1, failed=1)
    ann, bob = rows_of(answer["id"])
    assert ann.status == "sent"
    assert bob.status == "failed" and "ZeroDivisionError" in (bob.last_error or "")


def test_a_mailings_attachment_is_stored_once_and_sent_to_each(smtp_app, smtp, client, token):
    attachment = {"filename": "plan.txt", "content_type": "text/plain",
                  "content": base64.b64encode(b"the plan").decode()}  # fmt: skip
    answer = post(client, token, body(attachments=[attachment])).get_json()
    assert db.session.scalar(select(func.count()).select_from(MailingAttachment)) == 1
    assert db.session.scalar(select(func.count()).select_from(Attachment)) == 0
    assert Worker().drain() == Tally(sent=2)
    for mail in by_recipient(smtp).values():
        (part,) = list(mail.iter_attachments())
        assert (part.get_filename(), part.get_content()) == ("plan.txt", "the plan")
    assert [r.attachment_count for r in rows_of(answer["id"])] == [1, 1]


def test_send_again_of_a_recipient_copies_its_mail_as_rendered(smtp_app, smtp, client, token):
    answer = post(client, token, body(html="<p>{{ first }}</p>")).get_json()
    Worker().drain()
    ann = rows_of(answer["id"])[0]
    copy = queue.send_again(ann.id, "test", 3)
    assert (copy.subject, copy.text_body, copy.html_body) == (
        "Hello Ann", "Dear Ann, your plan is gold.", "<p>Ann</p>",
    )  # fmt: skip
    assert copy.mailing_id is None and copy.resent_from == ann.id


@pytest.mark.all_databases
def test_lanes_on_several_connections_render_each_recipient_once(smtp_app, smtp, client, token):
    smtp_app.config.update(MAIL_MAX_CONNECTIONS=3, BATCH_SIZE=5)  # threads render at once
    smtp.recorder.data_wait = 0.05
    people = [{"email": f"p{n}@example.com", "fields": {"first": f"P{n}", "plan": str(n)}}
              for n in range(30)]  # fmt: skip
    post(client, token, body(people))
    assert Worker().drain().sent == 30
    mails = by_recipient(smtp)
    assert len(smtp.received) == len(mails) == 30
    for n in range(30):
        mail = mails[f"p{n}@example.com"]
        assert mail["Subject"] == f"Hello P{n}"
        assert mail.get_body(("plain",)).get_content().strip() == f"Dear P{n}, your plan is {n}."


def test_a_mailing_mail_is_dkim_signed_over_its_list_unsubscribe_headers(
    smtp_app, smtp, client, token, runner
):
    smtp_app.config["UNSUBSCRIBE_URL"] = "https://outbox.example.com"
    records = add_key(runner, "example.com", "news1")
    post(client, token, body())
    assert Worker().drain() == Tally(sent=2)
    for received in smtp.received:
        assert "list-unsubscribe:list-unsubscribe-post" in tags(received.content)["h"]
        assert verifies(received.content, records)
