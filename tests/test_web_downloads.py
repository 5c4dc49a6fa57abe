"""The Content-Disposition of every download: any name, read back as it was given."""

import pytest
from flask import Response
from werkzeug.http import parse_options_header

from outbox.web.downloads import as_download


@pytest.mark.parametrize("name, ascii_name", [
    ("report.pdf", "report.pdf"),
    ('a "quoted" name.txt', 'a "quoted" name.txt'),
    ("Grüße.pdf", "Grue.pdf"),
    ("файл.txt", "download.txt"),
    ("日本語", "download"),
    ("📎 notes.txt", "notes.txt"),
])  # fmt: skip
def test_a_name_in_any_script_is_sent_as_utf_8_beside_an_ascii_one(name, ascii_name):
    header = as_download(Response(), name).headers["Content-Disposition"]
    header.encode("latin-1")  # what a WSGI server must be able to send
    assert parse_options_header(header) == ("attachment", {"filename": name})  # filename* wins
    fallback = parse_options_header(header.split("; filename*=")[0])
    assert fallback == ("attachment", {"filename": ascii_name})


def test_a_line_break_in_a_name_cannot_end_the_header():
    header = as_download(Response(), "a\r\nSet-Cookie: x=1.txt").headers["Content-Disposition"]
    assert header == 'attachment; filename="aSet-Cookie: x=1.txt"'
