"""The bounce inbox page, the raw mail as text, and a message page's bounces."""

import re

from outbox.capabilities.bounces import store
from outbox.worker import Worker
from tests.support import bouncemail
from tests.support.pages import as_role

BOUNCES = "bounces@example.com"


def sent_and_bounced(app, smtp, make_message, address: str = "ann@example.org"):  # type: ignore[no-untyped-def]
    """A message sent with VERP whose recipient bounced (hard); its id and the bounce's."""
    app.config["BOUNCE_ADDRESS"] = BOUNCES
    message = make_message(to=[address])
    Worker().drain()
    path = smtp.received[-1].mail_from
    pk = store.take_in(bouncemail.postfix(path, address, message.message_id), "smtp", None, [path])
    return message.id, pk


def test_the_inbox_lists_every_mail_newest_first_by_kind(smtp_app, smtp, make_message, staff):
    message_pk, hard = sent_and_bounced(smtp_app, smtp, make_message)
    ooo = store.take_in(bouncemail.out_of_office(BOUNCES, "bob@example.org"), "imap")
    lost = store.take_in(bouncemail.exim(BOUNCES, "zed@example.org", "<gone@example.com>"), "smtp")
    stray = store.take_in(bouncemail.stray(BOUNCES), "smtp")
    viewer = as_role(smtp_app, staff, "viewer")  # the inbox is for every staff member to read

    def shown(kind: str) -> list[int]:
        page = viewer.get(f"/bounces?kind={kind}")
        assert page.status_code == 200
        return [int(n) for n in re.findall(r'href="/bounces/(\d+)">#', page.text)]

    assert shown("all") == [stray, lost, ooo, hard]
    assert shown("hard") == [lost, hard]
    assert shown("unmatched") == [lost]
    assert shown("auto-reply") == [ooo]
    assert shown("unparsed") == [stray]
    assert shown("soft") == []
    page = viewer.get("/bounces").text
    assert f'href="/messages/{message_pk}">#{message_pk}</a>' in page and "unmatched" in page
    assert viewer.get("/bounces?kind=nonsense").status_code == 404
    assert viewer.get("/bounces?before=0").status_code == 400


def test_the_inbox_pages_by_id(app, signed_in):
    made = [store.take_in(bouncemail.stray(f"b{n}@example.com"), "smtp") for n in range(52)]
    first = signed_in.get("/bounces").text
    assert f'href="/bounces/{made[-1]}">#' in first and f'href="/bounces/{made[1]}">#' not in first
    older = re.search(r'rel="next" href="([^"]+)"', first)
    assert older is not None
    second = signed_in.get(older[1].replace("&amp;", "&")).text
    assert f'href="/bounces/{made[1]}">#' in second and f'href="/bounces/{made[0]}">#' in second
    assert 'rel="next"' not in second


def test_the_raw_mail_is_text_never_html(app, signed_in):
    hostile = bouncemail.stray(BOUNCES).replace(b"Hello,", b"<script>alert(1)</script><b>Hi</b>")
    pk = store.take_in(hostile, "smtp")
    raw = signed_in.get(f"/bounces/{pk}/raw")
    assert raw.status_code == 200 and raw.data == hostile
    assert raw.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert raw.headers["X-Content-Type-Options"] == "nosniff"
    assert raw.headers["Content-Security-Policy"].startswith("sandbox")
    page = signed_in.get(f"/bounces/{pk}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    assert signed_in.get("/bounces/999999").status_code == 404


def test_the_message_page_shows_the_bounced_recipient_and_its_bounce(
    smtp_app, smtp, make_message, signed_in
):
    message_pk, pk = sent_and_bounced(smtp_app, smtp, make_message)
    page = signed_in.get(f"/messages/{message_pk}").text
    assert "status-bounced" in page
    assert "Recipient address rejected: User unknown" in page
    assert f'href="/bounces/{pk}">#{pk}</a>' in page and f'href="/bounces/{pk}/raw"' in page
    detail = signed_in.get(f"/bounces/{pk}").text
    assert "by its return path" in detail and "5.1.1" in detail


def test_the_inbox_needs_a_signed_in_account(app, client):
    pk = store.take_in(bouncemail.stray(BOUNCES), "smtp")
    for path in ("/bounces", f"/bounces/{pk}", f"/bounces/{pk}/raw"):
        assert client.get(path).status_code == 302
