"""The connection caps and the per-client budget, with the time passed in."""

import resource

import pytest

from outbox import config
from outbox.smtp import admission
from outbox.smtp.admission import Admission, Limits

BUDGET = Limits(total=10, per_client=2, mails=3, size=1000)


def test_a_client_past_its_share_or_the_server_past_its_total_is_turned_away():
    door = Admission(Limits(total=3, per_client=2))
    assert [door.enter("a"), door.enter("a")] == [None, None]
    assert door.enter("a").startswith("421 4.7.0 Too many connections from your address")
    assert door.enter("b") is None
    assert door.enter("c").startswith("421 4.7.0 Too many connections: at most 3")
    door.leave("a")
    assert door.enter("c") is None
    assert (door.held, door.total) == ({"a": 1, "b": 1, "c": 1}, 3)


def test_a_budget_takes_mails_and_bytes_and_earns_them_back_over_a_minute():
    door = Admission(BUDGET)
    assert door.spend("a", 600, now=0.0) is None
    assert door.spend("a", 600, now=0.0).startswith("421 4.7.0 Too much mail")  # 400 left
    assert door.may_send("a", now=0.0) is None  # a smaller mail may still fit
    assert door.spend("a", 400, now=0.0) is None
    assert door.may_send("a", now=0.0) is not None  # no byte left
    assert door.spend("b", 1000, now=0.0) is None  # each client its own
    assert door.may_send("a", now=30.0) is None  # half of it back: 500 bytes, 1.5 mails
    assert door.spend("a", 600, now=30.0) is not None
    assert door.spend("a", 500, now=30.0) is None
    assert door.spend("a", 1, now=1e6) is None  # never more than the limits back
    assert door.budgets["a"].mails == 2 and door.budgets["a"].size == 999


def test_a_clock_going_back_earns_nothing():
    door = Admission(BUDGET)
    assert door.spend("a", 1000, now=100.0) is None
    assert door.may_send("a", now=50.0) is not None
    assert door.may_send("a", now=100.0) is not None


def test_no_budget_without_a_mail_limit():
    door = Admission(Limits(total=1, per_client=1))
    assert door.spend("a", 10**12, now=0.0) is None
    assert door.budgets == {}


def test_full_budgets_are_forgotten_once_many_clients_came():
    door = Admission(BUDGET)
    for n in range(admission.KEPT_BUDGETS + 1):
        door.spend(f"c{n}", 1, now=0.0)
    door.spend("late", 1, now=60.0)
    assert set(door.budgets) == {"late"}


@pytest.mark.parametrize(("peer", "client"), [
    (("192.0.2.7", 25), "192.0.2.7"),
    (("2001:db8:1:2:aaaa::1", 25, 0, 0), "2001:db8:1:2::/64"),
    (("2001:db8:1:2:bbbb::9", 25, 0, 0), "2001:db8:1:2::/64"),
    (("::ffff:192.0.2.7", 25, 0, 0), "192.0.2.7"),
])  # fmt: skip
def test_a_client_is_an_ipv4_address_or_an_ipv6_64(peer, client):
    assert admission.client_of(peer) == client


@pytest.mark.parametrize(("changed", "problem"), [
    ({"SMTPD_MAX_CONNECTIONS": 0}, "SMTPD_MAX_CONNECTIONS and SMTPD_MAX_CLIENT_CONNECTIONS"),
    ({"SMTPD_MAX_CLIENT_CONNECTIONS": 2000}, "SMTPD_MAX_CLIENT_CONNECTIONS must be at most"),
    ({"BOUNCE_MAX_CLIENT_CONNECTIONS": 0}, "BOUNCE_MAX_CONNECTIONS and"),
    ({"BOUNCE_CLIENT_MAILS": 0}, "BOUNCE_CLIENT_MAILS must be at least 1"),
    ({"BOUNCE_CLIENT_BYTES": 1000}, "BOUNCE_CLIENT_BYTES must be at least BOUNCE_MAX_BYTES"),
    ({"SMTPD_PREAUTH_TIMEOUT": 0.0}, "SMTPD_PREAUTH_TIMEOUT must be above 0"),
])  # fmt: skip
def test_caps_that_cannot_work_are_refused_at_start(changed, problem):
    with pytest.raises(ValueError, match=problem):
        admission.check({**config.DEFAULTS, **changed})


def test_the_open_file_limit_is_raised_to_fit_the_total_or_refused():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
        admission.open_files_for(Limits(total=300, per_client=1))
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 300 + admission.RESERVED_FILES
        if hard != resource.RLIM_INFINITY:
            with pytest.raises(ValueError, match="raise LimitNOFILE"):
                admission.open_files_for(Limits(total=hard, per_client=1))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
