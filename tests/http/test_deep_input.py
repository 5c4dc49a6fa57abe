"""Input built to exhaust a recursive parser or overflow a column: a 4xx naming it, never a 500.

JSON nested 50,000 deep (past the decoder's recursion) and 900 deep (decoded, but deep
enough to break whatever walks it next), addresses with nested comments and groups,
and ids past 2^63 - 1 (what SQLite's INTEGER holds), on every endpoint that takes them.
"""

import json

import pytest

from outbox.auth import tokens
from outbox.capabilities.submission import Refused, queue_raw
from outbox.core.untrusted_json import MAX_DEPTH
from tests.support.pages import csrf

HUGE = str(2**64)
DEEP = [50_000, 900, MAX_DEPTH + 1]
NESTED = "nested more than 64 objects or lists deep"


@pytest.fixture
def headers(app) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"Authorization": f"Bearer {tokens.create('shop', ['send', 'read', 'manage'])}"}


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def message(**fields: str) -> dict[str, str]:
    return {"to": "ann@example.com", "subject": "Hi", "text": "Hi", **fields}


def mailing() -> dict[str, object]:
    return {"from": "news@example.com", "subject": "Hi", "text": "Hi",
            "recipients": [{"email": "ann@example.com"}]}  # fmt: skip


def error_text(response) -> str:  # type: ignore[no-untyped-def]
    return json.dumps(response.get_json())


# Each endpoint that reads a JSON body, and a body of it with one value nested deep
# (DEPTH stands where it goes).
JSON_BODIES = {
    "/api/messages": json.dumps({**message(), "metadata": "DEPTH"}),
    "/api/messages/batch": json.dumps({"messages": [{**message(), "headers": "DEPTH"}]}),
    "/api/suppressions": json.dumps({"address": "a@example.com", "reason": "DEPTH"}),
    "/api/webhooks": json.dumps({"url": "https://hooks.example.com/", "events": "DEPTH"}),
    "/api/mailings": json.dumps({**mailing(), "recipients": [
        {"email": "ann@example.com", "fields": {"x": "DEPTH"}}]}),
    "/api/mailings/{id}/recipients": json.dumps(
        {"recipients": [{"email": "bob@example.com", "fields": {"x": "DEPTH"}}]}),
}  # fmt: skip


def path_of(client, headers, path: str) -> str:  # type: ignore[no-untyped-def]
    if "{id}" not in path:
        return path
    made = client.post("/api/mailings", data=json.dumps(mailing()),
                       content_type="application/json", headers=headers)  # fmt: skip
    assert made.status_code == 201, made.get_json()
    return path.replace("{id}", str(made.get_json()["id"]))


@pytest.mark.parametrize("depth", DEEP)
@pytest.mark.parametrize("path", JSON_BODIES)
def test_a_json_body_nested_deep_is_400_naming_it(client, headers, path, depth):
    url = path_of(client, headers, path)
    response = client.post(url, data=deep(depth), content_type="application/json",
                           headers=headers)  # fmt: skip
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert NESTED in error_text(response) or "must be a JSON object" in error_text(response)


@pytest.mark.parametrize("depth", DEEP)
@pytest.mark.parametrize("path", JSON_BODIES)
def test_a_value_nested_deep_in_a_json_body_is_400_naming_it(client, headers, path, depth):
    url = path_of(client, headers, path)
    body = JSON_BODIES[path].replace('"DEPTH"', deep(depth - 1))
    response = client.post(url, data=body, content_type="application/json", headers=headers)
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert NESTED in error_text(response)


def test_a_body_nested_to_the_limit_is_read_as_any_other(client, headers):
    body = {**message(), "metadata": json.loads(deep(MAX_DEPTH - 1))}
    response = client.post("/api/messages", json=body, headers=headers)
    assert response.status_code == 422  # read, and then held to what metadata takes
    assert "metadata" in response.get_json()["errors"]


NESTED_ADDRESSES = [
    "(" * 50_000 + "a@example.com",
    "(" * 900 + ")" * 900 + "a@example.com",
    "g:" * 50_000 + "a@example.com" + ";" * 50_000,
    "g:" * 900 + "a@example.com" + ";" * 900,
    "Ann " + "(" * 900 + "x" + ")" * 900 + " <a@example.com>",
]


@pytest.mark.parametrize("value", NESTED_ADDRESSES)
@pytest.mark.parametrize("field", ["to", "cc", "bcc", "from", "reply_to"])
def test_a_nested_address_in_a_message_is_422_naming_it(client, headers, field, value):
    response = client.post("/api/messages", json=message(**{field: value}), headers=headers)
    assert response.status_code == 422
    assert "is not an email address" in response.get_json()["errors"][field]
    batch = client.post("/api/messages/batch", json={"messages": [message(**{field: value})]},
                        headers=headers)  # fmt: skip
    assert batch.status_code == 422
    assert batch.get_json()["errors"][0]["field"] == field


@pytest.mark.parametrize("value", NESTED_ADDRESSES)
def test_a_nested_address_elsewhere_is_4xx_naming_it(client, headers, signed_in, value):
    added = client.post("/api/suppressions", json={"address": value, "reason": "manual"},
                        headers=headers)  # fmt: skip
    assert added.status_code == 422 and "not an email address" in error_text(added)
    listed = client.get("/api/messages", query_string={"recipient": value}, headers=headers)
    assert listed.status_code in (400, 422) and "not an email address" in error_text(listed)
    body = json.dumps({**mailing(), "recipients": [{"email": value}]})
    made = client.post("/api/mailings", data=body, content_type="application/json",
                       headers=headers)  # fmt: skip
    assert made.status_code == 422 and "not an email address" in error_text(made)
    form = {"csrf_token": csrf(signed_in), "to": value, "text": "Hi"}
    page = signed_in.post("/messages/new", data=form)
    assert page.status_code == 422 and "is not an email address" in page.get_data(as_text=True)


@pytest.mark.all_databases
@pytest.mark.parametrize("query", [{"message": HUGE}, {"before": HUGE},
                                   {"message": "9223372036854775808"}])  # fmt: skip
def test_an_id_past_the_largest_in_the_audit_filter_is_a_4xx(signed_in, staff, query):
    response = signed_in.get("/admin/audit", query_string=query)
    assert 400 <= response.status_code < 500, response.status_code


@pytest.mark.all_databases
@pytest.mark.parametrize("path", [f"/api/messages/{HUGE}", f"/api/webhooks/{HUGE}",
                                  f"/api/mailings/{HUGE}",
                                  f"/api/messages?before={HUGE}"])  # fmt: skip
def test_an_id_past_the_largest_in_the_api_is_a_4xx(client, headers, path):
    response = client.get(path, headers=headers)
    assert 400 <= response.status_code < 500, response.status_code


@pytest.mark.all_databases
@pytest.mark.parametrize("path", [f"/messages/{HUGE}", f"/bounces/{HUGE}",
                                  f"/mailings/{HUGE}", f"/webhooks/{HUGE}",
                                  f"/messages/?before={HUGE}", f"/bounces/?before={HUGE}",
                                  f"/mailings/?before={HUGE}", f"/suppressions/?before={HUGE}",
                                  f"/webhooks/1?before={HUGE}"])  # fmt: skip
def test_an_id_past_the_largest_on_the_pages_is_a_4xx_or_ignored(signed_in, staff, path):
    response = signed_in.get(path)
    assert response.status_code < 500, response.status_code


def folded(value: str) -> str:
    """value as a header field's body folded into lines of at most 80 characters."""
    return "\r\n ".join(value[n : n + 80] for n in range(0, len(value), 80))


@pytest.mark.parametrize("field", ["Content-Type: text/plain; charset=utf-8 ",
                                   "To: ann@example.com ", "From: shop@example.com "])  # fmt: skip
def test_a_submitted_mail_with_a_nested_comment_is_refused_or_shown_never_a_500(
    signed_in, staff, field
):
    comment = "(" * 3000 + ")" * 3000
    name = field.partition(":")[0].lower()
    head = {"content-type": "", "to": "To: ann@example.com\r\n",
            "from": "From: shop@example.com\r\n"}  # fmt: skip
    head[name] = f"{field}{folded(comment)}\r\n"
    raw = ("".join(head.values()) + "Subject: Hi\r\n\r\nHello\r\n").encode()
    try:
        queued = queue_raw("shop@example.com", ["ann@example.com"], raw, source="smtp:shop")
    except Refused as exc:
        assert exc.reply().startswith("554"), exc.reply()
        return
    response = signed_in.get(f"/messages/{queued.id}")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert "Hello" in page or "a header nests comments too deep" in page
