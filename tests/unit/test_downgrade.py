"""A handed-over header made ASCII for a server without SMTPUTF8 (RFC 6857), read back."""

import email
import email.policy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox.mail.downgrade import DowngradeError, ascii_header


def read(head: bytes) -> email.message.EmailMessage:
    """The header as a receiving mail reader decodes it."""
    return email.message_from_bytes(head + b"\r\nbody\r\n", policy=email.policy.default)  # type: ignore[return-value]


def test_a_typed_subject_becomes_encoded_words_that_read_back_the_same():
    head = "Subject: Grüße aus Köln – Ihre Bestellung\r\n".encode()
    written = ascii_header(head)
    assert written.isascii() and written.startswith(b"Subject: =?utf-8?")
    assert read(written)["Subject"] == "Grüße aus Köln – Ihre Bestellung"


def test_ascii_fields_keep_their_bytes_folding_included():
    ascii_part = (b"From: shop@example.com\r\nReferences: <a@example.com>\r\n"
                  b" <b@example.com>\r\nX-Mailer: PHP/8.2\r\n")  # fmt: skip
    written = ascii_header(ascii_part + "Subject: Größe\r\n".encode())
    assert written.startswith(ascii_part)


def test_display_names_are_encoded_and_domains_become_a_labels():
    head = ("From: Jörg Müller <joerg@bücher.example>\r\n"
            "To: Åsa <asa@example.se>, bob@example.com\r\n")  # fmt: skip
    written = ascii_header(head.encode())
    assert written.isascii()
    mail = read(written)
    [sender] = mail["From"].addresses
    assert (sender.display_name, sender.addr_spec) == ("Jörg Müller", "joerg@xn--bcher-kva.example")
    assert [a.addr_spec for a in mail["To"].addresses] == ["asa@example.se", "bob@example.com"]
    assert mail["To"].addresses[0].display_name == "Åsa"


def test_an_address_with_a_utf8_local_part_becomes_an_empty_group_naming_it():
    written = ascii_header("Cc: Jörg <jörg@example.com>, ann@example.com\r\n".encode())
    assert written.isascii()
    cc = read(written)["Cc"]
    assert [a.addr_spec for a in cc.addresses] == ["ann@example.com"]  # only what can go
    assert "jörg@example.com" in str(cc)  # the other still named, for the reader


def test_file_names_in_content_type_and_disposition_go_in_rfc_2231_form():
    head = ('Content-Type: application/pdf; name="Rechnung März.pdf"\r\n'
            'Content-Disposition: attachment; filename="Rechnung März.pdf"\r\n')  # fmt: skip
    written = ascii_header(head.encode())
    assert written.isascii() and b"filename*=UTF-8''Rechnung%20M%C3%A4rz.pdf" in written
    mail = read(b"MIME-Version: 1.0\r\n" + written)
    assert mail.get_filename() == "Rechnung März.pdf"
    assert mail.get_content_type() == "application/pdf"


@pytest.mark.parametrize("field", ["Message-ID: <bücher@example.com>", "Date: Mö, 3 Nov 2026",
                                   "Received: from bücher.example"])  # fmt: skip
def test_a_field_with_no_room_for_encoded_text_is_refused_by_name(field):
    with pytest.raises(DowngradeError, match=field.split(":")[0]):
        ascii_header(f"Subject: ok\r\n{field}\r\n".encode())


def test_bytes_that_are_not_utf8_are_refused_naming_the_field():
    with pytest.raises(DowngradeError, match="the Subject field is neither ASCII nor UTF-8"):
        ascii_header(b"Subject: Gr\xfc\xdfe\r\n")  # Latin-1


def test_an_address_field_that_holds_no_address_is_refused():
    with pytest.raises(DowngradeError, match="the To field holds UTF-8 and is not a list"):
        ascii_header("To: Jörg\r\n".encode())


TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=300)


@given(TEXT)
def test_any_subject_goes_in_short_ascii_lines_and_reads_back(subject):
    written = ascii_header(f"Subject: {subject}\r\n".encode())
    assert written.isascii()
    assert all(len(line) <= 78 for line in written.split(b"\r\n"))
    # Space around the text is not part of it: an ASCII field keeps its bytes (and a reader
    # may keep a trailing space), encoded words leave it out.
    assert read(written)["Subject"].strip(" ") == subject.strip(" ")
