"""Reading complaints: Yahoo's, Microsoft's (ARF and older) and a headers-only RFC 5965 report."""

from outbox.capabilities.bounces import parse
from outbox.capabilities.bounces.feedback import Complaint
from tests.support import bouncemail, complaintmail

FBL = "fbl@example.com"
PATH = "bounces+12-0-abcdefghijklmnop@example.com"
ANN = "ann@example.org"
MSGID = "<1795.42@example.com>"
FBID = "12:transactional:message:outbox"


def test_yahoos_report_names_everything_and_returns_the_mail_whole() -> None:
    found = parse.read(complaintmail.yahoo(FBL, PATH, ANN, MSGID, FBID))
    assert found.kind == parse.COMPLAINT and found.failures == []
    assert found.complaint == Complaint(
        feedback_type="abuse", user_agent="Yahoo!-Mail-Feedback/2.0", recipient=ANN,
        mail_from=PATH, arrival_date=complaintmail.DATE, return_path=PATH, feedback_id=FBID,
    )  # fmt: skip
    assert found.message_id == MSGID  # the returned mail's, not the report's own
    assert found.complaint.said == "abuse report from Yahoo!-Mail-Feedback/2.0"
    assert FBL in found.to_headers


def test_microsofts_arf_report_redacts_the_recipient() -> None:
    found = parse.read(complaintmail.jmrp(FBL, PATH, MSGID))
    assert found.kind == parse.COMPLAINT and found.complaint is not None
    assert found.complaint.user_agent == "Microsoft junk mail reporting/1.0"
    assert (found.complaint.recipient, found.complaint.mail_from) == (None, PATH)
    assert (found.complaint.return_path, found.message_id) == (PATH, MSGID)
    assert found.complaint.feedback_id is None


def test_microsofts_older_format_names_the_recipient_in_the_returned_mail() -> None:
    found = parse.read(complaintmail.jmrp_legacy(FBL, PATH, ANN, MSGID))
    assert found.kind == parse.COMPLAINT and found.complaint is not None
    assert found.complaint.feedback_type == "abuse"
    assert found.complaint.user_agent == "Microsoft JMRP"
    assert (found.complaint.recipient, found.complaint.return_path) == (ANN, PATH)
    assert found.message_id == MSGID


def test_a_headers_only_report_is_read_from_its_text_rfc822_headers() -> None:
    found = parse.read(complaintmail.headers_only(FBL, PATH, ANN, MSGID, FBID))
    assert found.kind == parse.COMPLAINT and found.complaint is not None
    assert (found.complaint.recipient, found.complaint.mail_from) == (ANN, PATH)
    assert (found.complaint.feedback_id, found.message_id) == (FBID, MSGID)
    assert found.complaint.user_agent == "SomeGenerator/1.0"


def test_a_report_without_its_optional_fields_is_still_a_complaint() -> None:
    found = parse.read(complaintmail.headers_only(FBL, PATH, None, MSGID))
    assert found.kind == parse.COMPLAINT and found.complaint is not None
    assert (found.complaint.recipient, found.complaint.feedback_id) == (None, None)


def test_bounces_and_auto_replies_are_no_complaints() -> None:
    for raw in (bouncemail.postfix(PATH, ANN, MSGID), bouncemail.gmail(PATH, ANN, MSGID),
                bouncemail.out_of_office(PATH, ANN)):  # fmt: skip
        found = parse.read(raw)
        assert found.kind != parse.COMPLAINT and found.complaint is None
