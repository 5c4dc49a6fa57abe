"""The dashboard's charts per stream, its failure groups and workers, and its live part
pushed as server-sent events (/live/events)."""

import http.client
import re
import threading
import time
from datetime import timedelta

import pytest
from werkzeug.serving import make_server

from outbox.core.status import Status
from outbox.models import utcnow
from outbox.ops import heartbeats
from tests.support.pages import Element, parse
from tests.support.rows import store


def page(client, path: str = "/") -> Element:  # type: ignore[no-untyped-def]
    response = client.get(path)
    assert response.status_code == 200
    return parse(response)


def words(element: Element) -> str:
    return " ".join(element.text.split())


def by_id(root: Element, name: str) -> Element:
    return next(e for e in root.iter() if e.get("id") == name)


def sent_now(make_message, stream: str = "transactional", took: float = 2.0, at=None) -> int:  # type: ignore[no-untyped-def]
    at = at or utcnow()
    message = make_message(now=at - timedelta(seconds=took))
    store(message.id, Status.QUEUED, status=Status.SENT.value, sent_at=at, settled_at=at,
          stream=stream)  # fmt: skip
    return int(message.id)


def totals(root: Element) -> dict[str, str]:
    return {a["data-stream"]: words(a.find(class_="stream-totals"))
            for a in root.find_all("article", class_="stream-chart")}  # fmt: skip


@pytest.mark.all_databases
def test_each_stream_has_a_throughput_and_a_latency_chart_with_its_figures(signed_in, make_message):
    at = utcnow()  # both in the same bucket
    sent_now(make_message, "broadcast", took=3.0, at=at)
    sent_now(make_message, "broadcast", took=1.0, at=at)
    root = page(signed_in, "/?window=1h")
    assert totals(root) == {"transactional": "0 sent, 0 failed", "broadcast": "2 sent, 0 failed"}
    broadcast = root.find("article", data_stream="broadcast")
    throughput, latency = broadcast.find_all("svg")
    for svg in (throughput, latency):
        assert svg["role"] == "img"
        title, desc = (words(by_id(root, i)) for i in svg["aria-labelledby"].split())
        assert title.startswith("Broadcast: ") and title.endswith("per 5 minutes, last 1 hour")
        assert desc
    assert len(throughput.find_all("rect", class_="bar-sent")) == 1
    assert latency.find("polyline", class_="line-p95")["points"]
    rows = [[words(td) for td in tr.find_all("td")]
            for tr in broadcast.find("details").find("tbody").find_all("tr")]  # fmt: skip
    assert [row[1:] for row in rows] == [["2", "0", "1.0 s", "3.0 s"]]


@pytest.mark.parametrize(("asked", "shown"), [("1h", "1 hour"), ("24h", "24 hours"),
                                              ("7d", "7 days"), ("1y", "24 hours")])  # fmt: skip
def test_the_window_is_in_the_url_and_the_live_part_keeps_it(signed_in, asked, shown):
    root = page(signed_in, f"/?window={asked}")
    current = root.find("nav", class_="windows").find("a", aria_current="page")
    assert words(current) == shown
    assert words(by_id(root, "stream-charts-title")) == f"Per stream, last {shown} (UTC)"
    key = current["data-window"]
    live = by_id(root, "live")
    query = "" if key == "24h" else f"?window={key}"  # the default is named by none
    assert (live["hx-get"], live["data-events"]) == (f"/{query}", f"/live/events{query}")
    assert live["hx-ext"] == "sse"
    for chart in root.find_all("article", class_="stream-chart"):
        throughput = chart.find("svg", class_="throughput")
        assert words(throughput.find("desc")).startswith("0 sent and 0 failed in all")
        axis = [words(t) for t in throughput.find_all("text", class_="axis")][1:]
        assert len(axis) == 4  # a label every quarter of the window's buckets
        empty = [words(td) for td in chart.find("tbody").find_all("td")]
        assert empty == ["Nothing ended in this window."]
    fragment = parse(signed_in.get(f"/?window={asked}", headers={"HX-Request": "true"}))
    assert words(fragment.find("nav", class_="windows").find("a", aria_current="page")) == shown


@pytest.mark.all_databases
def test_failures_are_grouped_by_reason_and_domain_each_linking_to_a_list(signed_in, make_message):
    now = utcnow()
    for to, error in ((["a@one.example"], "550 5.1.1 no such user a"),
                      (["b@one.example"], "550 5.1.1 no such user b")):  # fmt: skip
        message = make_message(to=to)
        store(message.id, Status.QUEUED, status=Status.FAILED.value, settled_at=now,
              last_error=error)  # fmt: skip
    root = page(signed_in)
    reasons = root.find("table", class_="reasons").find("tbody").find_all("tr")
    assert [[words(td) for td in r.find_all("td")] for r in reasons] == [["550 5.1.1", "2"]]
    reason_link = reasons[0].find("a")["href"]
    assert reason_link == "/messages?status=failed&error=5.1.1"
    domains = root.find("table", class_="domains").find("tbody").find_all("tr")
    assert [[words(td) for td in d.find_all("td")] for d in domains] == [["one.example", "2"]]
    link = domains[0].find("a")["href"]
    assert link == "/messages?status=failed&to=@one.example"
    for href in (reason_link, link):
        listed = page(signed_in, href)
        rows = listed.find("table", class_="messages").find("tbody").find_all("tr")
        assert len(rows) == 2, href


def test_nothing_failed_says_so(signed_in):
    groups = page(signed_in).find("section", class_="failure-groups")
    assert words(groups.find(class_="empty")) == "Nothing failed in the last 24 hours."


def test_workers_show_what_they_are_sending_and_the_lanes(signed_in, make_message):
    heartbeats.beat("w-1", utcnow(), 0)
    message = make_message()
    store(message.id, Status.QUEUED, status=Status.SENDING.value, locked_by="w-1",
          locked_at=utcnow(), stream="broadcast")  # fmt: skip
    root = page(signed_in)
    assert words(root.find("td", class_="in-hand")) == "1 broadcast"
    lanes = words(root.find("p", class_="lanes"))
    assert re.fullmatch(r"Each worker sends on \d+ lanes?.*\.", lanes)


def events(body: str) -> list[tuple[str, str]]:
    """The events of a text/event-stream body: their names and data."""
    found = []
    for block in body.split("\n\n")[:-1]:  # the last is "" or an event still coming
        lines = block.split("\n")
        names = [line[len("event: ") :] for line in lines if line.startswith("event: ")]
        data = "\n".join(line[len("data: ") :] for line in lines if line.startswith("data: "))
        if names:
            found.append((names[0], data))
    return found


def test_the_events_need_a_signed_in_account(app):
    response = app.test_client().get("/live/events")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/sign-in")


def test_the_events_carry_the_live_part_and_end_after_their_lifetime(app, signed_in):
    app.config.update(LIVE_STREAM_SECONDS=0, LIVE_PUSH_INTERVAL=0)
    response = signed_in.get("/live/events?window=1h")
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["X-Accel-Buffering"] == "no"
    body = response.get_data(as_text=True)
    assert body.startswith("retry: 1000\n\n")
    (name, html), end = events(body)
    assert name == "live" and end == ("end", "end")
    fragment = parse(html)
    assert by_id(fragment, "tiles").tag == "section"
    assert words(fragment.find("nav", class_="windows").find("a", aria_current="page")) == "1 hour"


def next_event(response: http.client.HTTPResponse) -> tuple[str, str]:
    """The next event of a stream as it comes (comments skipped): its name and data."""
    block: list[str] = []
    while True:
        line = response.readline().decode()
        assert line, "the stream ended"
        if line.strip():
            block.append(line)
            continue
        found = events("".join(block) + "\n\n")
        block = []
        if found:
            return found[0]


def test_a_change_is_pushed_in_the_next_event(app, signed_in, make_message):
    """Read as a browser reads it, over HTTP: the test client reads a body whole."""
    app.config.update(LIVE_STREAM_SECONDS=3600, LIVE_PUSH_INTERVAL=0.05)
    session = signed_in.get_cookie("session")
    server = make_server("127.0.0.1", 0, app, threaded=True)
    serving = threading.Thread(target=server.serve_forever, name="events-server")
    serving.start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", "/live/events", headers={"Cookie": f"session={session.value}"})
        response = conn.getresponse()
        assert (response.status, response.getheader("Content-Type")) == (
            200, "text/event-stream; charset=utf-8")  # fmt: skip
        name, first = next_event(response)
        assert name == "live"
        assert totals(parse(first))["transactional"] == "0 sent, 0 failed"
        sent_now(make_message)
        name, pushed = next_event(response)  # nothing in between: it pushes on a change
        assert name == "live"
        assert totals(parse(pushed))["transactional"] == "1 sent, 0 failed"
    finally:
        conn.close()
        server.shutdown()
        serving.join()
        server.server_close()


def test_past_live_streams_a_dashboard_is_told_503_and_a_place_comes_back_when_one_ends(
    app, signed_in
):
    """Each connection holds a thread: past LIVE_STREAMS the page polls, the API keeps its
    threads. A place comes back when a client goes away, and a HEAD holds none."""
    app.config.update(LIVE_STREAMS=1, LIVE_STREAM_SECONDS=3600, LIVE_PUSH_INTERVAL=0.05)
    session = signed_in.get_cookie("session")
    server = make_server("127.0.0.1", 0, app, threaded=True)
    serving = threading.Thread(target=server.serve_forever, name="events-server")
    serving.start()

    def ask() -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/live/events", headers={"Cookie": f"session={session.value}"})
        return conn, conn.getresponse()

    try:
        held, first = ask()
        assert first.status == 200 and next_event(first)[0] == "live"
        other, busy = ask()
        assert busy.status == 503
        assert (busy.getheader("Retry-After"), busy.getheader("Cache-Control")) == (
            "3600", "no-store")  # fmt: skip
        assert "polls instead" in busy.read().decode()
        other.close()
        first.close()  # the socket closes with the last of its users
        held.close()  # found gone at the server's next write, within LIVE_PUSH_INTERVAL
        deadline = time.monotonic() + 20
        while True:
            conn, again = ask()
            if again.status == 200 or time.monotonic() > deadline:
                break
            again.close()
            conn.close()
            time.sleep(0.05)
        assert again.status == 200
        again.close()
        conn.close()
    finally:
        server.shutdown()
        serving.join()
        server.server_close()
    app.config.update(LIVE_STREAM_SECONDS=0, LIVE_PUSH_INTERVAL=0)
    deadline = time.monotonic() + 20  # the last connection's place, given back at its write
    while signed_in.head("/live/events").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert signed_in.head("/live/events").status_code == 200  # a HEAD gave its place back
    assert signed_in.get("/live/events").status_code == 200
    app.config.update(LIVE_STREAMS=0)
    assert signed_in.get("/live/events").status_code == 503  # 0: every dashboard polls
