"""The outbox list's filter language: the search box's grammar and the form's fields, each
bad term refused with its name, and a filter spelled back as it was typed."""

from datetime import datetime

import pytest
from werkzeug.datastructures import MultiDict

from outbox.core.filters import Filter, FilterError, moment, parse, tokens

NOW = datetime(2026, 11, 27, 12, 0, 0)


def test_every_term_of_the_grammar_and_free_words_are_read():
    found = parse('to:@gmail.com from:shop@example.com status:failed stream:broadcast '
                  'source:api meta:order=4711 error:"mailbox full" since:24h mailing:12 '
                  'subject:invoice until:2026-11-01 late payment', now=NOW)  # fmt: skip
    assert found == Filter(status="failed", stream="broadcast", to="@gmail.com",
                           sender="shop@example.com", subject="invoice", source="api",
                           meta=(("order", "4711"),), error="mailbox full", since="24h",
                           until="2026-11-01", mailing=12, words="late payment")  # fmt: skip
    assert found.bounds(NOW) == (datetime(2026, 11, 26, 12), datetime(2026, 11, 1))


def test_the_forms_fields_join_the_search_box_and_a_term_given_twice_alike_is_one():
    form = MultiDict([("to", "@Example.com"), ("meta", "a=1"), ("meta", "b=2"), ("since", " ")])
    found = parse("to:@example.com invoice", form, now=NOW)
    assert found.to == "@example.com" and found.meta == (("a", "1"), ("b", "2"))
    assert found.words == "invoice" and found.since is None


def test_a_filter_spells_itself_back_and_each_chip_leaves_out_its_own_term():
    found = parse('status:failed to:ann@example.com error:"mailbox full" meta:k=v x', now=NOW)
    assert found.spelled() == 'to:ann@example.com meta:k=v error:"mailbox full" x'
    assert parse(found.spelled(), now=NOW) == Filter(**{**found.__dict__, "status": None})
    assert [t for _, t in found.terms()] == ["to:ann@example.com", "meta:k=v",
                                              'error:"mailbox full"', "x"]  # fmt: skip
    assert found.spelled(without='error:"mailbox full"') == "to:ann@example.com meta:k=v x"


def test_a_from_domain_may_be_written_bare_and_addresses_are_folded_to_lower_case():
    assert parse("from:Example.COM", now=NOW).sender == "@example.com"
    assert parse("from:Shop@Example.com to:@GMAIL.com", now=NOW).to == "@gmail.com"


@pytest.mark.parametrize("text, named", [
    ("colour:red", "colour:"), ("status:lost", "status:lost"), ("stream:bulk", "stream:bulk"),
    ("to:gmail.com", "to:gmail.com"), ("to:", "to:"), ("meta:order", "meta:order"),
    ("since:yesterday", "since:yesterday"), ("until:2026-13-01", "until:2026-13-01"),
    ("mailing:x", "mailing:x"), ("mailing:0", "mailing:0"), ('error:"open', "quote"),
    ("to:a@b.com to:c@d.com", "to:"), ("x" * 1000, "at most 998"), ("a\0", "NUL"),
])  # fmt: skip
def test_a_bad_term_is_refused_naming_it(text, named):
    with pytest.raises(FilterError) as refused:
        parse(text, now=NOW)
    assert named in str(refused.value)


def test_times_are_dates_iso_moments_or_a_time_ago():
    assert moment("2026-11-01", NOW) == datetime(2026, 11, 1)
    assert moment("2026-11-01T09:30+01:00", NOW) == datetime(2026, 11, 1, 8, 30)
    assert [moment(v, NOW) for v in ("30m", "2h", "7d", "2w")] == [
        datetime(2026, 11, 27, 11, 30), datetime(2026, 11, 27, 10), datetime(2026, 11, 20, 12),
        datetime(2026, 11, 13, 12)]  # fmt: skip


def test_a_job_keeps_its_filter_with_the_times_fixed_as_moments():
    found = parse("since:24h to:@example.com meta:k=v status:failed", now=NOW)
    fixed = found.fixed(NOW)
    assert fixed.since == "2026-11-26T12:00:00"
    again = Filter.from_json(fixed.to_json())
    assert again == fixed and again.bounds(datetime(2030, 1, 1))[0] == datetime(2026, 11, 26, 12)


def test_which_filters_need_a_window_and_which_an_index_serves():
    assert not parse("status:failed mailing:3", now=NOW).windowed
    assert not parse("status:failed", now=NOW).active
    assert parse("to:@a.com", now=NOW).windowed and parse("mailing:3", now=NOW).active


def test_quoted_words_keep_their_colons_and_spaces():
    assert tokens('"re: invoice" to:@a.com') == [(None, "re: invoice"), ("to", "@a.com")]


def test_free_words_are_spelled_as_typed_and_quoted_only_where_they_would_read_as_terms():
    assert parse("late  payment", now=NOW).spelled() == "late payment"
    assert parse('"re: invoice"', now=NOW).spelled() == '"re: invoice"'
    assert parse(parse('"re: invoice"', now=NOW).spelled(), now=NOW).words == "re: invoice"
