"""The message page's HTML body: remote loads renamed away in one linear pass, and a
body past SHOWN_HTML_CHARS shown in part, with a note saying so."""

import time

import pytest

from outbox.web.shown import SHOWN_HTML_CHARS, loads_remote, without_remote

from .pages import parse

KIB = 1024
MIB = 1024 * KIB


@pytest.mark.parametrize("html, shown", [
    ('<img src="https://t.example/p.gif">', '<img data-blocked-src="https://t.example/p.gif">'),
    ("<td background=//cdn.example/bg.png>", "<td data-blocked-background=//cdn.example/bg.png>"),
    ("<IMG SRC = 'HTTP://T.EXAMPLE/P'>", "<IMG data-blocked-SRC = 'HTTP://T.EXAMPLE/P'>"),
    ('<video poster="//v.example/p.jpg">', '<video data-blocked-poster="//v.example/p.jpg">'),
    ('<img srcset="a.png 1x,https://c.example/b.png 2x">',
     '<img data-blocked-srcset="a.png 1x,https://c.example/b.png 2x">'),
    ('<img alt="a > b" src=&#x68;ttps://t.example/>',
     '<img alt="a > b" data-blocked-src=&#x68;ttps://t.example/>'),
    ('<p style="background: url( \'http://c.example/a.png\' )">x',
     '<p style="background: url(data:,)">x'),
    ('<p style="background:url(//c.example/a.png">x', '<p style="background:url(data:,)">x'),
    ("<style>p { background: URL(https://c.example/a) }</style>",
     "<style>p { background: url(data:,) }</style>"),
    ("<noscript><img src=//t.example/p></noscript>",
     "<noscript><img data-blocked-src=//t.example/p></noscript>"),
    ('<img src="https://t.example/p', '<img data-blocked-src="https://t.example/p'),
])  # fmt: skip
def test_remote_loads_are_renamed_away_and_noted(html, shown):
    assert without_remote(html) == shown
    assert loads_remote(html)


@pytest.mark.parametrize("html", [
    '<img src="data:image/png;base64,//8AAAA=">',
    '<a href="https://shop.example/">shop</a> see https://shop.example/ src=//x',
    '<img src="cid:logo@shop.example" alt="//">',
    "<!-- <img src=https://t.example/p> -->",
    "<textarea><img src=https://t.example/p></textarea>",
    "<title>url(//t.example/p)</title>",
    '<p title="src=//t.example/p">',
])  # fmt: skip
def test_what_loads_nothing_from_elsewhere_stays_as_it_was(html):
    assert without_remote(html) == html
    assert not loads_remote(html)


# Bodies crafted against a scan that restarts at every unfinished token.
CRAFTED = ["src=a ", "<img src=a ", "url(//", "<a x='", "<!--", "<p style='url( ", "= "]


def cpu_seconds(work, *args) -> float:  # type: ignore[no-untyped-def]
    """The CPU time this thread spent on work: other processes on the machine do not count."""
    started = time.thread_time()
    work(*args)
    return time.thread_time() - started


@pytest.mark.parametrize("unit", CRAFTED)
def test_a_crafted_46_kib_body_is_filtered_at_once(unit):
    # The regular expressions this replaced took 4.6 s for 46 KiB of "src=a ".
    body = unit * (46 * KIB // len(unit))
    assert cpu_seconds(lambda: (loads_remote(body), without_remote(body))) < 2


@pytest.mark.parametrize("unit", ["src=a ", "<img src=//a "])
def test_a_crafted_5_mib_body_is_shown_in_part_and_at_once(signed_in, make_message, unit):
    head = '<p id="top">Top</p><img src="https://tracker.example/p.gif">'
    message = make_message(html=head + unit * (5 * MIB // len(unit)))
    seconds = cpu_seconds(lambda: signed_in.get(f"/messages/{message.id}"))
    seconds += cpu_seconds(lambda: signed_in.get(f"/messages/{message.id}/body.html"))
    assert seconds < 10  # the page and its frame; each took weeks for such a body
    page = parse(signed_in.get(f"/messages/{message.id}"))
    notes = [note.text for note in page.find_all("p", class_="note")]
    assert notes == [
        f"This HTML body is {len(message.html_body):,} characters long: "
        f"the page shows its first {SHOWN_HTML_CHARS:,}.",
        "Remote images were not loaded: this page shows the HTML without anything from "
        "other sites.",
    ]
    shown = signed_in.get(f"/messages/{message.id}/body.html").get_data(as_text=True)
    assert shown.startswith('<p id="top">Top</p><img data-blocked-src="https://tracker.example/')
    assert len(shown) < 2 * SHOWN_HTML_CHARS + len(head)  # each renamed load grows by 13
