"""Edit and resend: a failed or cancelled message opened as a new draft with its content,
corrected, queued as a new message that names the original."""

import io

import pytest
from sqlalchemy import select

from outbox import queue
from outbox.auth import accounts
from outbox.core.checks import Upload
from outbox.core.status import Status
from outbox.models import Message
from outbox.models.db import db
from tests.support.pages import Element, csrf, facts, fresh, move_to, parse

FILES = [Upload("invoice.pdf", "application/pdf", b"%PDF-1.4 first")]


def edit_links(page: Element) -> list[Element]:
    return [a for a in page.find_all("a") if a.text.strip() == "Edit and resend"]


@pytest.fixture
def failed(make_message) -> Message:  # type: ignore[no-untyped-def]
    """A message refused for good, with everything the form does not show."""
    message = make_message(from_addr="Shop <shop@example.com>", to=["Ann <ann@exmaple.com>"],
                           cc=["carl@example.com"], subject="Your invoice", text="Attached.",
                           html="<p>Attached.</p>", priority=5, headers={"X-Order": "4711"},
                           metadata={"order": "4711"}, attachments=FILES)  # fmt: skip
    move_to(message, Status.FAILED, "550 5.1.2 no such domain: exmaple.com")
    return message


def test_a_failed_message_opens_as_a_filled_draft_and_queues_a_corrected_copy(signed_in, failed):
    (link,) = edit_links(parse(signed_in.get(f"/messages/{failed.id}")))
    assert link["href"] == f"/messages/new?edit={failed.id}"
    draft = parse(signed_in.get(link["href"]))
    assert draft.find("h1").text == f"Edit and resend #{failed.id}"
    assert "invoice.pdf" in draft.find("p", class_="banner").text
    typed = {e["name"]: e.get("value") for e in draft.find_all("input") if e.get("name")}
    assert (typed["sender"], typed["to"], typed["cc"]) == (
        "Shop <shop@example.com>", "Ann <ann@exmaple.com>", "carl@example.com"
    )  # fmt: skip
    assert (typed["subject"], typed["priority"], typed["edit"]) == ("Your invoice", "5",
                                                                     str(failed.id))  # fmt: skip
    assert draft.find("textarea", name="text").text.strip() == "Attached."
    form = {**{k: v for k, v in typed.items() if v is not None and k != "attachments"},
            "text": "Attached, again.", "html": "<p>Attached.</p>",
            "to": "Ann <ann@example.com>", "csrf_token": csrf(signed_in),
            "attachments": [(io.BytesIO(b"more"), "note.txt", "text/plain")]}  # fmt: skip
    response = signed_in.post("/messages/new", data=form)
    assert response.status_code == 302
    copy = db.session.execute(select(Message).where(Message.id != failed.id)).scalar_one()
    assert response.headers["Location"] == f"/messages/{copy.id}"
    assert (copy.status, copy.resent_from, copy.listed("to")) == (
        "queued", failed.id, "Ann <ann@example.com>"
    )  # fmt: skip
    assert (copy.subject, copy.text_body, copy.priority, copy.listed("cc")) == (
        "Your invoice", "Attached, again.", 5, "carl@example.com"
    )  # fmt: skip
    assert (copy.headers, copy.meta) == ({"X-Order": "4711"}, {"order": "4711"})
    assert queue.read_attachments(copy.id) == [*FILES, Upload("note.txt", "text/plain", b"more")]
    assert fresh(failed.id).status == "failed"  # the original stays as it was
    original = parse(signed_in.get(f"/messages/{failed.id}")).find("section", id="state")
    assert facts(original.find("dl", class_="facts"))["Sent again as"] == f"#{copy.id}"


@pytest.mark.parametrize("status", [Status.SENT, Status.QUEUED, Status.DEFERRED])
def test_a_message_that_reached_someone_or_still_may_does_not_open_as_a_draft(
    signed_in, make_message, status
):
    message = make_message()
    move_to(message, status)
    assert edit_links(parse(signed_in.get(f"/messages/{message.id}"))) == []
    refused = signed_in.get(f"/messages/new?edit={message.id}")
    assert refused.status_code == 409
    assert f"Message {message.id} is {status.value}" in refused.text
    typed = {"csrf_token": csrf(signed_in), "to": "a@b.example", "text": "x",
             "edit": str(message.id)}  # fmt: skip
    posted = signed_in.post("/messages/new", data=typed)
    assert posted.status_code == 409
    assert db.session.scalar(select(Message.id).where(Message.id != message.id)) is None


@pytest.mark.parametrize("edit", ["999999", "x", "9" * 40])
def test_an_unknown_original_is_not_found(signed_in, edit):
    assert signed_in.get(f"/messages/new?edit={edit}").status_code == 404


def test_a_viewer_may_not_edit_and_resend(app, client, failed):
    accounts.create_user("viewer@example.com", "correct horse battery", role="viewer")
    client.post("/sign-in", data={"csrf_token": csrf(client, "/sign-in"),
                                  "email": "viewer@example.com",
                                  "password": "correct horse battery"})  # fmt: skip
    assert edit_links(parse(client.get(f"/messages/{failed.id}"))) == []
    assert client.get(f"/messages/new?edit={failed.id}").status_code == 403
