"""What the notices say after an action: counts and reasons in words."""

from datetime import datetime, timedelta

import pytest

from outbox.ops.reports import Count
from outbox.web import far_ahead, refusal
from outbox.web.bulk import moved_words
from outbox.web.messages import resent_all

NOW = datetime(2026, 11, 27, 12, 0)


@pytest.mark.parametrize(
    "done, chosen, movable, said",
    [
        (3, 3, 3, "3 messages queued again."),
        (1, 1, 1, "1 message queued again."),
        (2, 3, 2, "2 messages queued again. 1 left as it was: not failed or cancelled."),
        (0, 2, 2, "0 messages queued again. 2 left as they were: every recipient on the "
                  "suppression list, or moved meanwhile."),
        (1, 4, 2, "1 message queued again. 3 left as they were: 2 not failed or cancelled, "
                  "1 every recipient on the suppression list, or moved meanwhile."),
    ],
)  # fmt: skip
def test_a_bulk_move_says_how_many_moved_and_why_the_others_did_not(done, chosen, movable, said):
    assert moved_words(done, chosen, movable, "queued again", "failed or cancelled") == said


def test_resend_all_says_why_what_is_left_stays_failed():
    assert resent_all(0, Count(0, False)) == "Nothing was resent: no message is failed now."
    assert resent_all(2, Count(0, False)) == "2 failed messages queued again."
    assert resent_all(0, Count(1, False)) == (
        "0 failed messages queued again. 1 stays failed: every recipient of it is on the "
        "suppression list."
    )


def test_a_refusal_reads_as_one_sentence():
    assert refusal("Not possible now", "message 4 is not deferred") == (
        "Not possible now: message 4 is not deferred."
    )
    assert refusal("Bad request", "The CSRF token is missing.") == (
        "Bad request: the CSRF token is missing."
    )
    assert refusal("Not found", None) == "Not found."


def test_only_a_time_more_than_a_day_ahead_gets_its_date():
    assert far_ahead(NOW + timedelta(days=27), NOW)
    assert not far_ahead(NOW + timedelta(hours=23), NOW)
    assert not far_ahead(NOW - timedelta(days=3), NOW)
    assert not far_ahead(None, NOW)
