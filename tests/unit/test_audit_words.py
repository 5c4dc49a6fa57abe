"""An audit event's detail as the admin pages say it: words, not JSON."""

import json

import pytest

from outbox.web.admin import detail_words


@pytest.mark.parametrize(
    "detail, said",
    [
        (None, ""),
        ("relay maintenance", "relay maintenance"),
        (json.dumps({"requeued": 3}), "requeued: 3"),
        (json.dumps({"ids": [4, 5], "moved": 1}), "ids: 4, 5; moved: 1"),
        (json.dumps({"mailing": 7, "moved": 0, "expires_at": None}),
         "mailing: 7; moved: 0; expires at: none"),
        (json.dumps({"copy": 9, "whole": True}), "copy: 9; whole: yes"),
        (json.dumps({"ids": []}), "ids: none"),
        ("{not json", "{not json"),
    ],
)  # fmt: skip
def test_a_detail_reads_as_words(detail, said):
    assert detail_words(detail) == said
