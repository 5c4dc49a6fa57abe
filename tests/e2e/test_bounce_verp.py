"""VERP return paths: the token, and what goes on the wire with it (aiosmtpd, Postfix)."""

import pytest

from outbox import config as settings
from outbox.capabilities.bounces import verp
from outbox.core.status import Status
from outbox.worker import Worker
from tests.support.rows import fresh, states
from tests.support.wire import send

A, B, C = "a@example.com", "b@example.com", "c@example.com"
BOUNCES = "bounces@example.com"


def test_a_token_names_its_message_and_recipient_and_cannot_be_forged():
    path = verp.address_for(BOUNCES, "key", 1234, 2)
    local, _, domain = path.partition("@")
    assert domain == "example.com" and local.startswith("bounces+1234-2-")
    assert len(local) <= 64
    assert verp.target(path, BOUNCES, "key") == verp.Target(1234, 2)
    # Relays may fold the local part's case or write the domain otherwise; the MAC holds.
    assert verp.target(path.upper(), BOUNCES, "key") == verp.Target(1234, 2)
    assert verp.target(f"<{path}>", BOUNCES, "key") == verp.Target(1234, 2)
    assert verp.target(path, BOUNCES, "another key") is None
    forged = path.replace("1234-2-", "1235-2-")
    assert verp.target(forged, BOUNCES, "key") is None
    assert verp.target(path.replace("example.com", "example.org"), BOUNCES, "key") is None
    assert verp.is_bounce_address("Bounces@EXAMPLE.com", BOUNCES, "key")
    assert not verp.is_bounce_address(forged, BOUNCES, "key")
    assert not verp.is_bounce_address("postmaster@example.com", BOUNCES, "key")


def test_the_longest_token_fits_the_local_part():
    path = verp.address_for("a" * 20 + "@example.com", "key", 2**63 - 1, verp.MAX_INDEX)
    assert len(path.partition("@")[0]) <= 64
    verp.check({"BOUNCE_ADDRESS": "a" * 20 + "@example.com"})


@pytest.mark.parametrize(
    ("address", "problem"),
    [("b" * 30 + "@example.com", "no room"), ("bounces+x@example.com", "without '[+]'"),
     ("bounces", "ASCII address"), ("bünces@example.com", "ASCII address")],
)  # fmt: skip
def test_a_bounce_address_that_cannot_carry_a_token_is_refused_at_start(address, problem):
    config = {**settings.DEFAULTS, "BOUNCE_ADDRESS": address}
    with pytest.raises(ValueError, match=problem):
        settings.check(config)


@pytest.mark.all_databases
def test_with_verp_each_recipient_goes_in_its_own_transaction_with_its_return_path(
    smtp_app, smtp, make_message
):
    smtp_app.config["BOUNCE_ADDRESS"] = BOUNCES
    first = make_message(to=[A, B], cc=[C])
    second = make_message(to=[C])  # its first envelope goes ahead with the end of the first
    Worker().drain()
    assert fresh(first.id).status == Status.SENT and fresh(second.id).status == Status.SENT
    got = [(mail.mail_from, mail.rcpt_tos, mail.message_id) for mail in smtp.received]
    assert [(rcpts, mid) for _, rcpts, mid in got] == [
        ([A], first.message_id), ([B], first.message_id), ([C], first.message_id),
        ([C], second.message_id),
    ]  # fmt: skip
    targets = [verp.target(sender, BOUNCES, smtp_app.secret_key) for sender, _, _ in got]
    assert targets == [verp.Target(first.id, 0), verp.Target(first.id, 1),
                       verp.Target(first.id, 2), verp.Target(second.id, 0)]  # fmt: skip
    assert smtp.recorder.connections == 1  # one connection for all of it


@pytest.mark.all_databases
def test_with_verp_a_refused_recipient_fails_alone_and_the_others_are_sent(
    smtp_app, smtp, make_message
):
    smtp_app.config["BOUNCE_ADDRESS"] = BOUNCES
    smtp.recorder.rcpt_replies[B] = "550 5.1.1 no such user"
    smtp.recorder.rcpt_replies[C] = "451 4.3.0 try again later"
    message = make_message(to=[A, B, C])
    Worker().drain()
    row = fresh(message.id)
    assert row.status == Status.DEFERRED
    assert states(row) == {A: ("sent", None, 1), B: ("failed", 550, 1), C: ("deferred", 451, 1)}
    assert [mail.rcpt_tos for mail in smtp.received] == [[A]]
    assert row.last_error == (
        "delivered to 1 of 3 recipients; deferred: c@example.com: 451 4.3.0 try again later; "
        "failed: b@example.com: 550 5.1.1 no such user"
    )


def test_without_verp_the_message_is_one_transaction_from_the_sender(smtp_app, smtp, make_message):
    message = make_message(to=[A, B], cc=[C])
    Worker().drain()
    assert fresh(message.id).status == Status.SENT
    assert [(m.mail_from, m.rcpt_tos) for m in smtp.received] == [("outbox@example.com", [A, B, C])]


def test_each_copy_delivered_by_postfix_carries_its_recipients_return_path(
    app, make_message, postfix_smtpd
):
    app.config["BOUNCE_ADDRESS"] = BOUNCES
    message, mails = send(app, make_message, postfix_smtpd, to=[A, B])
    paths = {mail.rcpt_tos[0]: mail.mail_from for mail in mails}  # Return-Path of each copy
    assert paths == {A: verp.address_for(BOUNCES, app.secret_key, message.id, 0),
                     B: verp.address_for(BOUNCES, app.secret_key, message.id, 1)}  # fmt: skip


@pytest.mark.parametrize("pipelining", [True, False])
def test_with_verp_a_refusal_in_the_envelope_sent_ahead_leaves_the_rest_to_go(
    smtp_app, smtp, make_message, pipelining
):
    smtp_app.config["BOUNCE_ADDRESS"] = BOUNCES
    smtp.recorder.pipelining = pipelining
    smtp.recorder.rcpt_replies[B] = "550 5.1.1 no such user"
    first = make_message(to=[A])
    second = make_message(to=[B, C])  # B's envelope goes with the end of the first mail
    third = make_message(to=[A])
    Worker().drain()
    assert states(fresh(second.id)) == {B: ("failed", 550, 1), C: ("sent", None, 1)}
    assert fresh(first.id).status == fresh(third.id).status == Status.SENT
    got = [(verp.target(m.mail_from, BOUNCES, smtp_app.secret_key), m.rcpt_tos)
           for m in smtp.received]  # fmt: skip
    assert got == [(verp.Target(first.id, 0), [A]), (verp.Target(second.id, 1), [C]),
                   (verp.Target(third.id, 0), [A])]  # fmt: skip
