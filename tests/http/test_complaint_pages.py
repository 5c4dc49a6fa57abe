"""Complaints on the pages: the bounce inbox's complaint tab, one report, a message's page."""

import re

from outbox.capabilities.bounces import store
from outbox.worker import Worker
from tests.support import bouncemail, complaintmail

BOUNCES = "bounces@example.com"
ANN = "ann@example.org"


def sent_and_complained(app, smtp, make_message):  # type: ignore[no-untyped-def]
    """A message sent with VERP whose recipient complained; its id and the report's."""
    app.config["BOUNCE_ADDRESS"] = BOUNCES
    message = make_message(to=[ANN])
    Worker().drain()
    path = smtp.received[-1].mail_from
    pk = store.take_in(complaintmail.yahoo(BOUNCES, path, ANN, message.message_id), "imap")
    return message.id, pk


def test_the_complaint_tab_lists_the_complaints_alone(smtp_app, smtp, make_message, signed_in):
    message_pk, complaint = sent_and_complained(smtp_app, smtp, make_message)
    lost = store.take_in(complaintmail.headers_only(BOUNCES, "x@example.com", "zed@example.org",
                                                    "<gone@example.com>"), "smtp")  # fmt: skip
    store.take_in(bouncemail.stray(BOUNCES), "smtp")

    def shown(kind: str) -> list[int]:
        page = signed_in.get(f"/bounces?kind={kind}")
        assert page.status_code == 200
        return [int(n) for n in re.findall(r'href="/bounces/(\d+)">#', page.text)]

    assert shown("complaint") == [lost, complaint]
    assert shown("unmatched") == [lost]
    page = signed_in.get("/bounces?kind=complaint").text
    assert 'aria-current="page">complaint<' in page and "status-complaint" in page
    assert f'href="/messages/{message_pk}">#{message_pk}</a>' in page and "unmatched" in page


def test_a_complaint_shows_on_its_message_page_and_its_own(smtp_app, smtp, make_message,
                                                          signed_in):  # fmt: skip
    message_pk, pk = sent_and_complained(smtp_app, smtp, make_message)
    page = signed_in.get(f"/messages/{message_pk}").text
    assert "status-complained" in page and "Bounces and complaints" in page
    assert "abuse report from Yahoo!-Mail-Feedback/2.0" in page
    assert f'href="/bounces/{pk}">#{pk}</a>' in page
    detail = signed_in.get(f"/bounces/{pk}").text
    assert "by its return path" in detail and "complained" in detail and ANN in detail
    assert "reported by Yahoo!-Mail-Feedback/2.0" in detail
