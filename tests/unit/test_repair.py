"""A submitted mail's long lines and bare LFs repaired (outbox.capabilities.submission.repair); no database.

Every repaired mail must hold no line over 998 octets and decode, part for part, to what
was sent; what needed no repair keeps its bytes.
"""

import base64
from email import message_from_bytes
from email.message import Message
from email.policy import compat32

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outbox.capabilities.submission import Refused
from outbox.capabilities.submission.repair import repaired
from tests.support.mailcheck import long_lines

HEAD = b"From: a@example.com\r\nTo: b@example.com\r\nSubject: hi\r\n"
LONG_HTML = b"<p>" + b"word " * 1000 + b"</p>"  # 5,007 octets, one line


def leaves(data: bytes) -> list[tuple[str, bytes]]:
    """Each leaf part's type and decoded content, as a reader gets them."""
    mail = message_from_bytes(data, policy=compat32)
    return [(p.get_content_type(), _decoded(p)) for p in mail.walk() if not p.is_multipart()]


def _decoded(part: Message) -> bytes:
    found = part.get_payload(decode=True)
    assert isinstance(found, bytes)
    return found


def multipart(*parts: bytes, preamble: bytes = b"") -> bytes:
    body = b"".join(b"--b1\r\n" + p + b"\r\n" for p in parts)
    return (HEAD + b'MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary="b1"\r\n'
            b"\r\n" + preamble + body + b"--b1--\r\n")  # fmt: skip


TEXT = b"Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
HTML = b"Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"


@pytest.mark.parametrize(
    "data",
    [
        HEAD + b"\r\n" + b"x" * 998 + b"\r\n",
        multipart(TEXT + b"Gr\xc3\xbc\xc3\x9fe\r\n", HTML + b"<p>" + b"y" * 990 + b"</p>"),
        HEAD + b"Subject: " + b"s" * 989 + b"\r\n\r\nbody\r\n",
        b"Subject:no space\r\n  odd  folding \r\n\r\n.\r\n",
    ],
)
def test_a_mail_without_long_lines_or_bare_lfs_keeps_its_bytes(data):
    assert repaired(data) is data


def test_bare_lfs_are_line_ends_and_curls_terminator_crlf_no_empty_line():
    sent = b"From: a@example.com\nSubject: hi\n\nline one\n.dot\n\nlast\n"
    assert repaired(sent + b"\r\n") == sent.replace(b"\n", b"\r\n")
    assert repaired(b"From: a@example.com\n\nno end") == b"From: a@example.com\r\n\r\nno end"
    assert repaired(b"From: a@example.com\r\n\r\nmixed\nends\r\n") == (
        b"From: a@example.com\r\n\r\nmixed\r\nends\r\n"
    )


def test_a_bare_cr_is_left_for_the_store_to_refuse():
    data = HEAD + b"\r\n" + b"x" * 1200 + b"\rmore\r\n"
    assert repaired(data) is data


def test_a_long_header_is_folded_at_whitespace_and_unfolds_to_what_was_sent():
    value = b" ".join(b"word%d" % n for n in range(400))  # 3,089 octets
    data = HEAD + b"X-Words:  " + value + b"\r\n\r\nbody\r\n"
    got = repaired(data)
    assert long_lines(got) == [] and got.startswith(HEAD) and got.endswith(b"\r\n\r\nbody\r\n")
    field = got[len(HEAD) : got.index(b"\r\n\r\n") + 2]
    assert max(map(len, field.split(b"\r\n"))) <= 78
    assert field.replace(b"\r\n ", b" ") == b"X-Words:  " + value + b"\r\n"  # unfolded
    assert not any(line.strip() == b"" for line in field.split(b"\r\n")[:-1])


def test_a_run_of_999_octets_with_no_space_is_refused_naming_the_field():
    data = HEAD + b"X-Token: abc " + b"t" * 999 + b" def\r\n\r\nbody\r\n"
    with pytest.raises(Refused) as refused:
        repaired(data)
    assert refused.value.reply() == (
        "554 5.6.0 the X-Token field cannot be folded: it holds 999 octets without a space, "
        "over the 998 a line may have (RFC 5322 2.1.1)"
    )
    folded = repaired(data.replace(b"t" * 999, b"t" * 990))  # a long word, but it fits
    assert max(map(len, folded.split(b"\r\n"))) == len(b" " + b"t" * 990)


def test_a_part_header_that_cannot_be_folded_is_refused_naming_the_part():
    name = b"Content-Disposition: attachment; filename=" + b"f" * 1000 + b"\r\n"
    data = multipart(TEXT + b"hi", b"Content-Type: text/plain\r\n" + name + b"\r\nx")
    with pytest.raises(Refused) as refused:
        repaired(data)
    assert "the Content-Disposition field of body part 2 cannot be folded" in refused.value.text


def test_a_long_html_line_becomes_quoted_printable_with_its_charset_kept():
    html = LONG_HTML.replace(b"word", "Grüße".encode(), 3)
    data = HEAD + b"Content-Type: text/html; charset=utf-8\r\n\r\n" + html + b"\r\n"
    got = repaired(data)
    assert long_lines(got) == []
    assert got.startswith(HEAD + b"Content-Type: text/html; charset=utf-8\r\n"
                          b"Content-Transfer-Encoding: quoted-printable\r\n"
                          b"MIME-Version: 1.0\r\n")  # fmt: skip
    assert leaves(got) == [("text/html", html + b"\r\n")]
    assert message_from_bytes(got).get_content_charset() == "utf-8"


def test_a_mail_with_no_content_type_gets_the_charset_its_8bit_text_is_in():
    text = "é".encode() * 700
    got = repaired(HEAD + b"\r\n" + text + b"\r\n")
    assert b"Content-Type: text/plain; charset=utf-8\r\n" in got
    got = repaired(HEAD + b"\r\n" + b"\xe9" * 1400 + b"\r\n")
    assert b"Content-Type: text/plain; charset=unknown-8bit\r\n" in got
    assert leaves(got) == [("text/plain", b"\xe9" * 1400 + b"\r\n")]


def test_only_the_long_part_of_a_multipart_is_encoded_again():
    plain = TEXT + b"Gr\xc3\xbc\xc3\x9fe\r\n.dot"
    data = multipart(plain, HTML + LONG_HTML, preamble=b"This is MIME.\r\n")
    got = repaired(data)
    assert long_lines(got) == []
    before = got.replace(b"Encoding: quoted-printable", b"Encoding: 8bit")
    assert before.startswith(data[: data.index(LONG_HTML)])  # the rest kept its bytes
    assert got.endswith(b"\r\n--b1--\r\n")
    assert leaves(got) == leaves(data)


def test_a_text_part_of_8bit_script_goes_base64_when_that_is_shorter():
    greek = "αβγδε ".encode() * 300
    got = repaired(multipart(HTML + greek))
    assert b"Content-Transfer-Encoding: base64" in got and long_lines(got) == []
    assert leaves(got)[0] == ("text/html", greek)


def test_binary_content_with_a_long_line_becomes_base64():
    blob = bytes(b for b in range(1, 256) if b not in b"\r\n") * 8  # one line of 2,024
    part = b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: binary\r\n\r\n"
    got = repaired(multipart(TEXT + b"see attached", part + blob))
    assert b"Content-Transfer-Encoding: base64\r\n" in got and long_lines(got) == []
    assert leaves(got)[1] == ("application/octet-stream", blob)


def test_quoted_printable_and_base64_with_long_lines_are_encoded_again():
    qp = b"Content-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"
    b64 = b"Content-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\n"
    blob = bytes(range(256)) * 10
    data = multipart(qp + b"caf=C3=A9 " * 200 + b"\r\nend", b64 + base64.b64encode(blob))
    got = repaired(data)
    assert long_lines(got) == [] and got.count(b"quoted-printable") == 1
    assert leaves(got) == [("text/plain", "café ".encode() * 200 + b"\r\nend"), ("image/png", blob)]


@pytest.mark.parametrize(
    ("part", "named"),
    [
        (b"Content-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\n" + b"!" * 1000,
         "body part 1 (image/png) is not valid base64"),
        (b"Content-Type: text/plain\r\nContent-Transfer-Encoding: x-uuencode\r\n\r\n" + b"u" * 999,
         "body part 1 (text/plain) has lines over 998 octets in a transfer encoding outbox "
         "cannot encode again (x-uuencode)"),
    ],
)  # fmt: skip
def test_a_part_that_cannot_be_encoded_again_is_refused_naming_it(part, named):
    with pytest.raises(Refused) as refused:
        repaired(multipart(part))
    assert named in refused.value.text


def test_a_forwarded_mail_inside_is_repaired_and_a_long_preamble_wrapped():
    inner = b"From: c@example.com\r\nSubject: fwd\r\n\r\n" + b"z" * 2000 + b"\r\n"
    forwarded = b"Content-Type: message/rfc822\r\n\r\n" + inner
    preamble = b"-" * 998 + b"--b1\r\n"  # cut at 998, its end would be a delimiter line
    got = repaired(multipart(TEXT + b"see below", forwarded, preamble=preamble))
    assert long_lines(got) == [] and b"\r\n---b1\r\n" in got
    assert [kind for kind, _ in leaves(got)] == ["text/plain", "text/plain"]
    [mail] = message_from_bytes(got).get_payload()[1].get_payload()
    assert mail["Subject"] == "fwd" and mail.get_payload(decode=True) == b"z" * 2000 + b"\r\n"


LINE = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=1500).filter(
    lambda line: not line.startswith("--")
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(LINE, min_size=1, max_size=4), min_size=1, max_size=3))
def test_any_text_repaired_has_short_lines_and_decodes_to_what_was_sent(parts):
    bodies = [b"\r\n".join(line.encode() for line in lines) for lines in parts]
    data = multipart(*(TEXT + body for body in bodies))
    got = repaired(data)
    assert long_lines(got) == []
    assert [content for _, content in leaves(got)] == bodies


def test_a_long_line_that_is_no_field_is_left_for_the_store_to_refuse_by_line():
    data = HEAD + b"y" * 1200 + b"\r\n\r\nbody\r\n"
    assert repaired(data) == data


def nested(depth: int) -> bytes:
    opened = b"".join(b"--b%d\r\nContent-Type: multipart/mixed; boundary=b%d\r\n\r\n" % (n, n + 1)
                      for n in range(depth))  # fmt: skip
    return (HEAD + b"Content-Type: multipart/mixed; boundary=b0\r\n\r\n" + opened
            + b"--b%d\r\n\r\n" % depth + b"x" * 1000 + b"\r\n")  # fmt: skip


def test_parts_nested_past_50_deep_are_refused_and_50_are_repaired():
    assert long_lines(repaired(nested(50))) == []
    forwarded = HEAD + b"Content-Type: message/rfc822\r\n\r\n" * 60 + b"x" * 1000 + b"\r\n"
    for data in (nested(51), forwarded):
        with pytest.raises(Refused) as refused:
            repaired(data)
        assert refused.value.text.endswith(" holds parts more than 50 deep")
