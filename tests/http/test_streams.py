"""Streams over HTTP: stored and defaulted from each entry point, bad names refused, the
listing's filter, the pages and the metrics."""

import io

import pytest
import sqlalchemy as sa

from outbox.auth import tokens
from outbox.core.streams import Stream
from outbox.models import Message
from outbox.models.db import db
from tests.support.api import BATCH, MESSAGES, VALID, auth, nothing_stored, post
from tests.support.mailing_helpers import body as mailing_body
from tests.support.mailing_helpers import post as post_mailing
from tests.support.mailing_helpers import rows_of
from tests.support.metrics import samples, value
from tests.support.pages import compose, parse

METRICS_TOKEN = "scrape-me"


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


def stream_of(message_pk: int) -> str:
    found = db.session.scalar(sa.select(Message.stream).where(Message.id == message_pk))
    db.session.commit()
    assert found is not None
    return found


@pytest.mark.all_databases
@pytest.mark.parametrize("given, kept", [(None, "transactional"), ("broadcast", "broadcast"),
                                         ("transactional", "transactional"),
                                         (" Broadcast ", "broadcast")])  # fmt: skip
def test_json_keeps_the_stream_given_or_the_default(client, token, given, kept):
    answer = post(client, token, VALID if given is None else {**VALID, "stream": given})
    assert answer.status_code == 201, answer.get_json()
    assert answer.get_json()["stream"] == kept
    assert stream_of(answer.get_json()["id"]) == kept


@pytest.mark.all_databases
def test_a_form_and_a_multipart_body_take_the_stream(client, token):
    form = {"to": "ann@example.com", "text": "Hi", "stream": "broadcast"}
    urlencoded = client.post(MESSAGES, data=form, headers=auth(token))
    assert urlencoded.status_code == 201, urlencoded.get_json()
    upload = {**form, "attachments": (io.BytesIO(b"x"), "a.txt", "text/plain")}
    multipart = client.post(MESSAGES, data=upload, headers=auth(token),
                            content_type="multipart/form-data")  # fmt: skip
    assert multipart.status_code == 201, multipart.get_json()
    assert {stream_of(a.get_json()["id"]) for a in (urlencoded, multipart)} == {"broadcast"}
    plain = client.post(MESSAGES, data={"to": "ann@example.com", "text": "Hi"}, headers=auth(token))
    assert stream_of(plain.get_json()["id"]) == "transactional"


@pytest.mark.all_databases
def test_a_batch_keeps_each_messages_stream(client, token):
    messages = [VALID, {**VALID, "stream": "broadcast"}]
    answer = client.post(BATCH, json={"messages": messages}, headers=auth(token))
    assert answer.status_code == 201, answer.get_json()
    ids = [m["id"] for m in answer.get_json()["messages"]]
    assert [stream_of(pk) for pk in ids] == ["transactional", "broadcast"]


@pytest.mark.parametrize("given", ["newsletter", "", 5, ["broadcast"]])
def test_an_unknown_stream_is_refused_naming_the_streams(client, token, given):
    answer = post(client, token, {**VALID, "stream": given})
    if given == "":  # an empty form field is no stream: the default
        assert answer.status_code == 201
        return
    assert answer.status_code == 422
    error = answer.get_json()["errors"]["stream"]
    assert "transactional" in error and "broadcast" in error, error
    assert nothing_stored()


def test_a_batch_with_an_unknown_stream_stores_nothing(client, token):
    messages = [VALID, {**VALID, "stream": "bulk"}]
    answer = client.post(BATCH, json={"messages": messages}, headers=auth(token))
    assert answer.status_code == 422
    (problem,) = answer.get_json()["errors"]
    assert (problem["index"], problem["field"]) == (1, "stream")
    assert "'bulk' is not a stream" in problem["error"]
    assert nothing_stored()


@pytest.mark.all_databases
def test_the_listing_filters_by_stream_and_the_detail_shows_it(client, token):
    ids = {}
    for name in ("transactional", "broadcast", "transactional"):
        answer = post(client, token, {**VALID, "stream": name})
        ids.setdefault(name, []).append(answer.get_json()["id"])
    for name, expected in ids.items():
        page = client.get(f"{MESSAGES}?stream={name}", headers=auth(token)).get_json()
        assert [m["id"] for m in page["messages"]] == sorted(expected, reverse=True)
        assert {m["stream"] for m in page["messages"]} == {name}
    both = client.get(f"{MESSAGES}?stream=broadcast&status=queued", headers=auth(token))
    assert [m["id"] for m in both.get_json()["messages"]] == ids["broadcast"]
    shown = client.get(f"{MESSAGES}/{ids['broadcast'][0]}", headers=auth(token)).get_json()
    assert shown["stream"] == "broadcast"


def test_the_listing_refuses_an_unknown_stream(client, token):
    answer = client.get(f"{MESSAGES}?stream=bulk", headers=auth(token))
    assert answer.status_code == 422
    assert "'bulk' is not a stream" in answer.get_json()["errors"]["stream"]


@pytest.mark.all_databases
def test_the_compose_page_offers_the_streams_and_stores_the_choice(signed_in):
    page = parse(signed_in.get("/messages/new"))
    (select,) = page.find_all("select", name="stream")
    assert [o["value"] for o in select.find_all("option")] == ["transactional", "broadcast"]
    assert compose(signed_in, stream="broadcast").status_code == 302
    assert compose(signed_in).status_code == 302
    streams = db.session.scalars(sa.select(Message.stream).order_by(Message.id)).all()
    assert streams == ["broadcast", "transactional"]
    refused = compose(signed_in, stream="bulk")
    assert refused.status_code == 422
    assert "&#39;bulk&#39; is not a stream" in refused.get_data(as_text=True)


@pytest.mark.all_databases
def test_a_mailings_recipients_are_broadcast_mail(client, token):
    answer = post_mailing(client, token, mailing_body())
    assert answer.status_code == 201, answer.get_json()
    assert {row.stream for row in rows_of(answer.get_json()["id"])} == {"broadcast"}


@pytest.mark.all_databases
def test_the_outbox_list_filters_by_stream_and_the_dashboard_counts_each(signed_in, make_message):
    make_message(subject="reset")
    make_message(subject="news one", stream=Stream.BROADCAST)
    make_message(subject="news two", stream=Stream.BROADCAST)
    listed = parse(signed_in.get("/messages?stream=broadcast"))
    subjects = {a.text.strip() for a in listed.find_all("a", class_="row-link")}
    assert subjects == {"news one", "news two"}
    every = parse(signed_in.get("/messages"))
    assert len(every.find_all("a", class_="row-link")) == 3
    assert signed_in.get("/messages?stream=bulk").status_code == 400
    dashboard = parse(signed_in.get("/"))
    counts = {a["data-stream"]: a.find("span").text for a in
              dashboard.find_all("a", class_="stream-count")}  # fmt: skip
    assert counts == {"transactional": "1", "broadcast": "2"}


def test_the_message_page_names_a_broadcast_stream(signed_in, make_message):
    news = make_message(stream=Stream.BROADCAST)
    reset = make_message()
    shown = [parse(signed_in.get(f"/messages/{m.id}")) for m in (news, reset)]
    terms = [{dt.text.strip(): dt for dt in page.find_all("dt")} for page in shown]
    assert "Stream" in terms[0] and "Stream" not in terms[1]


def test_metrics_count_enqueues_by_stream(app, client, token):
    app.config["METRICS_TOKEN"] = METRICS_TOKEN

    def enqueued() -> dict[str, float]:
        page = client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        found = samples(page.text)
        return {s: value(found, "outbox_stream_enqueued_total", stream=s)
                for s in ("transactional", "broadcast")}  # fmt: skip

    before = enqueued()
    post(client, token, VALID)
    post(client, token, {**VALID, "stream": "broadcast"})
    messages = [{**VALID, "stream": "broadcast"}] * 2 + [VALID]
    client.post(BATCH, json={"messages": messages}, headers=auth(token))
    after = enqueued()
    assert after["transactional"] - before["transactional"] == 2
    assert after["broadcast"] - before["broadcast"] == 3
