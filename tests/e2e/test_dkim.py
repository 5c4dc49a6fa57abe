"""DKIM end to end: keys made by `outbox dkim`, mails a real worker sent to real servers,
each signature checked with dkimpy's verify() given the record the command printed."""

import re

import dkim
import pytest
import sqlalchemy as sa
from flask_migrate import downgrade, upgrade

from outbox import create_app
from outbox.capabilities.dkim import keyring
from outbox.core.checks import Upload
from outbox.mail.rendered import Features
from outbox.models import DkimKey, utcnow
from outbox.models.db import db, dispose_engines
from outbox.worker import Tally, Worker
from tests.support.app import base_config
from tests.support.dkimkeys import SIGNATURE, add_key, dns, other_body, published, tags, verifies
from tests.support.wire import aiosmtpd_server, send

PLAIN, UTF8 = Features(), Features(eight_bit=True, smtputf8=True)


def drained(app, offers: Features, make_message, **fields) -> bytes:  # type: ignore[no-untyped-def]
    """One message sent by a worker to an aiosmtpd server offering offers; the bytes it got."""
    with aiosmtpd_server(offers) as server:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = server.port
        make_message(**fields)
        assert Worker().drain() == Tally(sent=1)
        (got,) = server.received()
    return got.content


# --- the command ---


def test_add_prints_the_record_split_into_strings_of_255_octets(app, runner):
    result = runner.invoke(args=["dkim", "add", "Example.COM", "--selector", "S2026"])
    assert result.exit_code == 0, result.output
    line = result.output.splitlines()[1]
    assert line.startswith('s2026._domainkey.example.com. IN TXT ( "v=DKIM1; k=rsa; p=MIIB')
    strings = re.findall(r'"([^"]*)"', line)
    assert len(strings) == 2 and len(strings[0]) == 255  # RSA-2048's record is about 410
    (key,) = db.session.scalars(sa.select(DkimKey)).all()
    assert (key.domain, key.selector, key.algorithm) == ("example.com", "s2026", "rsa-sha256")
    assert key.private_key.startswith("-----BEGIN PRIVATE KEY-----")
    assert "".join(strings) == f"v=DKIM1; k=rsa; p={key.public_key}"


def test_an_idn_domain_is_stored_as_its_a_label(app, runner):
    records = add_key(runner, "Bücher.example", "e1", "--algorithm", "ed25519")
    (name,) = records
    assert name == b"e1._domainkey.xn--bcher-kva.example."
    assert re.fullmatch(rb"v=DKIM1; k=ed25519; p=[A-Za-z0-9+/]{43}=", records[name])


def test_list_and_remove(app, runner):
    add_key(runner, "example.com", "a")
    add_key(runner, "example.com", "b", "--algorithm", "ed25519")
    listed = runner.invoke(args=["dkim", "list"]).output.splitlines()
    assert [line.split("\t")[:3] for line in listed] == [
        ["example.com", "a", "rsa-sha256"], ["example.com", "b", "ed25519-sha256"]]  # fmt: skip
    with_records = runner.invoke(args=["dkim", "list", "--records"]).output
    assert set(published(with_records)) == {b"a._domainkey.example.com.",
                                            b"b._domainkey.example.com."}  # fmt: skip
    result = runner.invoke(args=["dkim", "remove", "EXAMPLE.com.", "--selector", "A"])
    assert result.exit_code == 0 and "removed key a of example.com" in result.output
    assert [k.selector for k in db.session.scalars(sa.select(DkimKey))] == ["b"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["add", "exa mple.com", "--selector", "s"], "bad domain 'exa mple.com'"),
        (["add", "x-.example", "--selector", "s"], "bad domain 'x-.example'"),
        (["add", "a..example", "--selector", "s"], "bad domain 'a..example'"),
        (["add", "example.com", "--selector", "s_1"], "bad selector 's_1'"),
        (["add", "example.com", "--selector", "s", "--algorithm", "dsa"],
         "unknown algorithm 'dsa': choose rsa or ed25519"),
        (["add", "example.com", "--selector", "s", "--bits", "512"],
         "RSA keys have 1024, 2048, 3072, 4096 bits, not 512"),
        (["remove", "example.com", "--selector", "nope"],
         "example.com has no key with the selector 'nope'"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_the_problem(app, runner, args, error):
    result = runner.invoke(args=["dkim", *args])
    assert result.exit_code == 1 and f"Error: {error}" in result.output
    assert db.session.scalars(sa.select(DkimKey)).all() == []


def test_a_selector_is_taken_once_per_domain(app, runner):
    add_key(runner, "example.com", "s1")
    result = runner.invoke(args=["dkim", "add", "example.com", "--selector", "S1"])
    assert result.exit_code == 1
    assert "Error: example.com has a key with the selector 's1' already" in result.output
    add_key(runner, "example.net", "s1")  # another domain may use the same name


# --- the table ---


@pytest.mark.all_databases
def test_0017_makes_the_key_table_with_one_key_per_selector_and_goes_back(empty_database_url):
    app = create_app(base_config(empty_database_url))
    with app.app_context():
        try:
            upgrade(revision="0016")
            assert "dkim_keys" not in sa.inspect(db.engine).get_table_names()
            upgrade(revision="0017")
            row = {"domain": "example.com", "selector": "s1", "algorithm": "rsa-sha256",
                   "private_key": "x" * 5000, "public_key": "y" * 800,
                   "created_at": utcnow()}  # fmt: skip
            table = DkimKey.__table__
            with db.engine.begin() as conn:
                conn.execute(sa.insert(table), [row, {**row, "domain": "example.net"}])
            with pytest.raises(sa.exc.IntegrityError), db.engine.begin() as conn:
                conn.execute(sa.insert(table), [row])
            with db.engine.connect() as conn:
                keys = conn.execute(sa.select(table.c.private_key)).scalars().all()
            assert keys == ["x" * 5000] * 2  # a 4096-bit key's PEM is about 3,300
            downgrade(revision="0016")
            assert "dkim_keys" not in sa.inspect(db.engine).get_table_names()
        finally:
            db.session.remove()
            dispose_engines()


# --- what a worker sends ---


@pytest.mark.all_databases
@pytest.mark.parametrize("offers", [PLAIN, UTF8], ids=["7bit server", "8BITMIME SMTPUTF8"])
def test_rsa_and_ed25519_signatures_of_a_utf8_mail_verify_as_received(app, runner, make_message,
                                                                       offers):  # fmt: skip
    records = add_key(runner, "example.com", "rsa1") | add_key(
        runner, "example.com", "ed1", "--algorithm", "ed25519"
    )
    text = "Grüße aus Köln, ½ €\n" * 40
    message = drained(app, offers, make_message, from_addr="shop@example.com",
                      to=["ann@example.net"], subject="Straße", text=text)  # fmt: skip
    assert (b"Content-Transfer-Encoding: 8bit" in message) == offers.eight_bit
    assert [tags(message, i)["a"] for i in range(2)] == ["rsa-sha256", "ed25519-sha256"]
    assert [tags(message, i)["s"] for i in range(2)] == ["rsa1", "ed1"]
    assert tags(message)["h"] == "from:to:subject:date:message-id:mime-version:content-type:from"
    for index in range(2):
        assert verifies(message, records, index)
    tampered = other_body(message)
    assert not any(verifies(tampered, records, i) for i in range(2))


@pytest.mark.parametrize("offers", [PLAIN, UTF8], ids=["7bit server", "8BITMIME SMTPUTF8"])
def test_long_lines_and_attachments_verify(app, runner, make_message, offers):
    records = add_key(runner, "example.com", "s1")
    near = "x" * 990 + "\n" + "é" * 497 + "\n"  # lines near 998 octets, ASCII and UTF-8
    html = "<p>" + "minified html " * 3600 + "</p>"  # 50 KB on one line
    attachment = Upload("data.bin", "application/octet-stream", bytes(range(256)) * 2000)
    message = drained(app, offers, make_message, text=near, html=html,
                      from_addr="shop@example.com", attachments=[attachment])  # fmt: skip
    assert b"multipart/mixed" in message and max(map(len, message.split(b"\r\n"))) <= 998
    assert dkim.verify(message, dnsfunc=dns(records))


def test_an_idn_from_domain_signs_as_its_a_label(app, runner, make_message):
    records = add_key(runner, "bücher.example", "s1")
    message = drained(app, UTF8, make_message, from_addr="news@bücher.example")
    assert tags(message)["d"] == "xn--bcher-kva.example"
    assert dkim.verify(message, dnsfunc=dns(records))


def test_a_mail_from_a_domain_without_a_key_is_not_signed(app, runner, make_message):
    add_key(runner, "example.com", "s1")
    message = drained(app, PLAIN, make_message, from_addr="shop@example.org")
    assert b"DKIM-Signature" not in message


def test_the_nearest_domain_with_a_key_signs(app, runner, make_message):
    parent = add_key(runner, "example.com", "p1")
    message = drained(app, PLAIN, make_message, from_addr="news@mail.shop.example.com")
    assert tags(message)["d"] == "example.com"  # relaxed DMARC alignment
    assert dkim.verify(message, dnsfunc=dns(parent))
    own = add_key(runner, "shop.example.com", "o1")
    app.extensions.pop("dkim")  # a new worker process: the key is read at once
    message = drained(app, PLAIN, make_message, from_addr="news@mail.shop.example.com")
    assert len(SIGNATURE.findall(message)) == 1 and tags(message)["d"] == "shop.example.com"
    assert dkim.verify(message, dnsfunc=dns(own))


def test_keys_are_read_once_per_refresh_not_per_mail(app, runner, make_message):
    add_key(runner, "example.com", "s1")
    statements: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda *args: statements.append(args[2]))  # fmt: skip
    with aiosmtpd_server(PLAIN) as server:
        app.config["MAIL_PORT"] = app.extensions["mail"].port = server.port
        for _ in range(5):
            make_message(from_addr="shop@example.com")
        assert Worker().drain() == Tally(sent=5)
        assert all(b"DKIM-Signature" in got.content for got in server.received())
    assert len([s for s in statements if "FROM dkim_keys" in s]) == 1


def test_a_key_added_while_a_worker_runs_signs_after_the_refresh(app, runner):
    ring = keyring.Keyring(refresh=60.0)
    assert ring.signers("example.com", now=1000.0) == ()
    add_key(runner, "example.com", "s1")
    assert ring.signers("example.com", now=1059.0) == ()  # not reread yet
    (found,) = ring.signers("example.com", now=1060.0)
    assert (found.domain, found.selector) == (b"example.com", b"s1")
    runner.invoke(args=["dkim", "remove", "example.com", "--selector", "s1"])
    assert ring.signers("example.com", now=1120.0) == ()


def test_keys_read_before_go_on_signing_when_a_refresh_cannot_read_them(app, runner, caplog):
    ring = keyring.Keyring(refresh=60.0)
    add_key(runner, "example.com", "s1")
    (found,) = ring.signers("example.com", now=0.0)
    db.session.execute(sa.text("ALTER TABLE dkim_keys RENAME TO dkim_keys_away"))
    db.session.commit()
    assert ring.signers("example.com", now=60.0) == (found,)
    assert "could not reread the DKIM keys" in caplog.text
    with pytest.raises(sa.exc.OperationalError):  # nothing read yet: no mail goes unsigned
        keyring.Keyring(refresh=60.0).signers("example.com", now=0.0)


def test_a_signed_mail_still_verifies_after_a_postfix_relay(app, runner, make_message,
                                                            postfix_relay):  # fmt: skip
    records = add_key(runner, "example.com", "s1", "--algorithm", "ed25519")
    records |= add_key(runner, "example.com", "s2")
    _, (mail,) = send(app, make_message, postfix_relay, from_addr="shop@example.com",
                      text="Grüße\n" + "x" * 990 + "\n", subject="Relayed")  # fmt: skip
    assert b"Received: " in mail.content  # it did pass through Postfix
    for index in range(2):
        assert verifies(mail.content, records, index)
