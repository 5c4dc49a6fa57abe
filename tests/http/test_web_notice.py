"""The notice every page action answers with: its words on success and refusal, over htmx or not."""

from outbox.capabilities.suppression import manage
from outbox.core.status import Status
from outbox.ops import pause
from tests.support.pages import as_role, csrf, fresh, htmx, move_to, notice_of, parse

SUPPRESSED = "Not possible now: every recipient of message {pk} is on the suppression list."


def failed_to(make_message, address: str) -> int:  # type: ignore[no-untyped-def]
    return move_to(make_message(to=[address]), Status.FAILED)


def test_a_refused_resend_says_why_on_its_page_and_on_the_dashboard(signed_in, make_message):
    pk = failed_to(make_message, "gone@example.com")
    manage.add("gone@example.com", "asked us by phone")
    headers = htmx(signed_in, f"/messages/{pk}")
    for path in (f"/messages/{pk}/resend", f"/failures/{pk}/resend"):
        answer = signed_in.post(path, headers=headers)
        assert answer.status_code == 409, path
        assert notice_of(answer) == {"text": SUPPRESSED.format(pk=pk), "refused": True}
    assert fresh(pk).status == "failed"
    # Without JavaScript the same click shows a page that explains.
    page = signed_in.post(f"/messages/{pk}/resend", data={"csrf_token": csrf(signed_in, "/")})
    assert page.status_code == 409 and notice_of(page) is None
    assert f"every recipient of message {pk} is on the suppression list" in page.text


def test_a_resend_says_so_in_place_and_without_javascript_on_the_next_page(signed_in, make_message):
    first, second = (failed_to(make_message, f"r{n}@example.com") for n in (1, 2))
    answer = signed_in.post(f"/messages/{first}/resend", headers=htmx(signed_in))
    assert answer.status_code == 200 and parse(answer).find("section", id="state")
    assert notice_of(answer) == {"text": f"Message #{first} is queued again.", "refused": False}
    moved = signed_in.post(f"/failures/{second}/resend", data={"csrf_token": csrf(signed_in)})
    assert moved.status_code == 302 and notice_of(moved) is None
    page = parse(signed_in.get(moved.headers["Location"]))
    assert page.find(id="notice").text == f"Message #{second} is queued again."
    assert page.find(id="notice")["role"] == "status"
    assert parse(signed_in.get("/")).find(id="notice").text == ""  # said once


def test_resend_all_failed_says_how_many_moved_and_why_the_rest_did_not(signed_in, make_message):
    headers = htmx(signed_in)
    unticked = signed_in.post("/messages/resend-failed", headers=headers)
    assert unticked.status_code == 200 and unticked.headers["HX-Reswap"] == "none"
    assert notice_of(unticked) == {"text": "Tick the box to confirm: nothing was resent.",
                                   "refused": True}  # fmt: skip
    none = signed_in.post("/messages/resend-failed", data={"confirm": "y"}, headers=headers)
    assert notice_of(none)["text"] == "Nothing was resent: no message is failed now."
    kept = failed_to(make_message, "gone@example.com")
    moved = failed_to(make_message, "here@example.com")
    manage.add("gone@example.com", "asked us by phone")
    done = signed_in.post("/messages/resend-failed", data={"confirm": "y"}, headers=headers)
    assert done.status_code == 200 and parse(done).find("section", id="tiles")
    assert notice_of(done)["text"] == (
        "1 failed message queued again. 1 stays failed: every recipient of it is on the "
        "suppression list."
    )
    assert (fresh(kept).status, fresh(moved).status) == ("failed", "queued")


def test_pause_and_resume_say_what_they_did_and_what_was_so_already(signed_in):
    headers = htmx(signed_in)
    said = [
        notice_of(signed_in.post(path, data={"confirmed": "yes"}, headers=headers))["text"]
        for path in ("/pause", "/pause", "/resume", "/resume")
    ]
    assert said == [
        "Sending is paused: the workers stop claiming messages.",
        "Sending was paused already, by staff@example.com.",
        "Sending resumes: the workers send the waiting messages.",
        "Sending was not paused: nothing changed.",
    ]
    assert pause.current() is None


def test_a_role_that_may_not_act_is_told_so_in_place(app, staff, make_message):
    pk = failed_to(make_message, "r@example.com")
    viewer = as_role(app, staff, "viewer")
    answer = viewer.post(f"/messages/{pk}/resend", headers=htmx(viewer))
    assert answer.status_code == 403
    notice = notice_of(answer)
    assert notice["refused"] is True and notice["text"].startswith("Not allowed for your role")


def test_bulk_says_nothing_was_chosen_as_a_refusal(signed_in):
    answer = signed_in.post("/messages/bulk", data={"move": "cancel", "confirmed": "yes"},
                            headers=htmx(signed_in, "/messages"))  # fmt: skip
    assert notice_of(answer) == {"text": "Nothing was chosen: tick the messages first.",
                                 "refused": True}  # fmt: skip
