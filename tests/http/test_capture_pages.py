"""The Captured page, a captured mail as its recipient sees it, the banner on every page, roles."""

import html
import re

import pytest

from outbox.core.checks import Upload
from outbox.worker import Tally, Worker
from tests.support.pages import as_role

HOSTILE = '<p style="color: red">Hello</p><script>alert("ran")</script><img src="https://tracker.example/p.gif">'


@pytest.fixture
def capture_app(app):  # type: ignore[no-untyped-def]
    app.config["DELIVERY"] = "capture"
    return app


def captured(make_message, **fields):  # type: ignore[no-untyped-def]
    """A message sent in capture mode; its id and its captured copy's."""
    upload = Upload("report.pdf", "application/pdf", b"%PDF-1.4 data")
    message = make_message(subject="Staging hello", html=HOSTILE, attachments=[upload], **fields)
    assert Worker().drain() == Tally(sent=1)
    return message.id


def test_the_list_shows_each_captured_mail_and_links_it_to_its_message(
    capture_app, make_message, staff
):
    message_pk = captured(make_message, to=["ann@example.com", "bob@example.org"])
    viewer = as_role(capture_app, staff, "viewer")  # for every staff member to read
    page = viewer.get("/captured")
    assert page.status_code == 200
    (pk,) = [int(n) for n in re.findall(r'href="/captured/(\d+)">#', page.text)]
    assert "Staging hello" in page.text and "bob@example.org" in page.text
    assert f'href="/messages/{message_pk}">#{message_pk}</a>' in page.text
    message_page = viewer.get(f"/messages/{message_pk}").text
    assert f'href="/captured/{pk}">captured mail #{pk}</a>' in message_page
    assert viewer.get("/captured?before=0").status_code == 400
    assert viewer.get("/captured/999999").status_code == 404


def test_a_captured_mail_shows_headers_parts_attachments_and_source_with_no_script(
    capture_app, make_message, signed_in
):
    captured(make_message)
    pk = int(re.findall(r'href="/captured/(\d+)">#', signed_in.get("/captured").text)[0])
    response = signed_in.get(f"/captured/{pk}")
    page = response.text
    assert "<dt>Subject</dt><dd>Staging hello</dd>" in page
    assert "<dt>Message-ID</dt>" in page and "<dt>Date</dt>" in page
    frame = re.search(r'<iframe class="body" sandbox="" srcdoc="([^"]*)"', page)
    assert frame is not None  # sandbox="": no script, no form, no same origin
    assert "&lt;p style=&#34;color: red&#34;&gt;Hello" in frame[1]
    shown = html.unescape(frame[1])
    assert " src=" not in shown and "tracker.example" in shown  # renamed away, not loaded
    assert "<script>alert" not in page  # the script is text in an attribute, inert
    policy = dict(
        p.strip().split(" ", 1) for p in response.headers["Content-Security-Policy"].split(";")
    )
    assert (
        policy["script-src"] == "'self'" and policy["img-src"] == "'self' data:"
    )  # srcdoc takes it
    assert f'href="/captured/{pk}/attachments/0"' in page and "report.pdf" in page
    assert "Raw source" in page and "Content-Type: multipart/mixed" in page
    download = signed_in.get(f"/captured/{pk}/attachments/0")
    assert download.data == b"%PDF-1.4 data"
    assert download.headers["Content-Disposition"] == "attachment; filename=report.pdf"
    assert signed_in.get(f"/captured/{pk}/attachments/1").status_code == 404
    raw = signed_in.get(f"/captured/{pk}/raw")
    assert raw.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert raw.headers["Content-Security-Policy"].startswith("sandbox")
    assert b"Subject: Staging hello" in raw.data


@pytest.mark.parametrize(("mode", "said"), [
    ("capture", "Capture mode:"),
    ("allowlist", "Allowlist mode:"),
])  # fmt: skip
def test_every_page_says_loudly_which_mode_is_on(app, signed_in, client, mode, said):
    app.config["DELIVERY"] = mode
    app.config["DELIVERY_ALLOW"] = frozenset({"qa@example.com", "@team.example"})
    for path in ("/", "/messages", "/routes", "/captured"):
        page = signed_in.get(path).text
        assert said in page and 'class="banner delivery"' in page, path
        assert 'href="/captured"' in page
    assert said in client.get("/sign-in").text  # before signing in too
    if mode == "allowlist":
        assert "mail goes out only to @team.example, qa@example.com" in signed_in.get("/").text


def test_smtp_mode_shows_no_banner_and_no_captured_link(app, signed_in):
    page = signed_in.get("/").text
    assert 'class="banner delivery"' not in page and 'href="/captured"' not in page
    assert signed_in.get("/captured").status_code == 200  # copies kept earlier stay readable


def test_the_captured_pages_need_a_signed_in_account(capture_app, make_message, client):
    captured(make_message)
    for path in ("/captured", "/captured/1", "/captured/1/raw", "/captured/1/attachments/0"):
        assert client.get(path).status_code == 302
