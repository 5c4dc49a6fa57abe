"""One entry of an address list is one address: through the API, a batch and the compose page.

email.utils.getaddresses took "<a@example.com> <evil@attacker.example>" for two
recipients (the CVE-2023-27043 class); outbox reads the entries itself.
"""

import json

import pytest
from sqlalchemy import func, select

from outbox.auth import tokens
from outbox.models import Message
from outbox.models.db import db
from tests.support.pages import csrf, parse

MESSAGES = "/api/messages"
SMUGGLED = [
    "<ann@example.com> <evil@attacker.example>",
    "ann@example.com <evil@attacker.example>",
    "Ann <ann@example.com> evil@attacker.example",
    "ann@example.com evil@attacker.example",
    "friends: ann@example.com, evil@attacker.example;",
    "ann@example.com; evil@attacker.example",
    "ann@example.com)<evil@attacker.example",
]


@pytest.fixture
def token(app) -> str:  # type: ignore[no-untyped-def]
    return tokens.create("shop")


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def stored() -> int:
    db.session.commit()
    return db.session.scalar(select(func.count()).select_from(Message)) or 0


def multipart(fields: dict[str, str]) -> tuple[bytes, str]:
    parts = [f'name="{name}"\r\n\r\n{value}' for name, value in fields.items()]
    body = "".join(f"--B\r\nContent-Disposition: form-data; {p}\r\n" for p in parts) + "--B--\r\n"
    return body.encode(), "multipart/form-data; boundary=B"


def first_entry(value: str) -> str:
    """The entry of value the error names: the text up to its first top-level comma."""
    return value.split(",")[0].strip()


@pytest.mark.parametrize("value", SMUGGLED)
@pytest.mark.parametrize("field", ["to", "cc", "bcc"])
def test_a_json_entry_of_two_addresses_is_422_naming_it(client, token, field, value):
    body = {"to": "bob@example.com", field: [value], "subject": "Hi", "text": "Hi"}
    response = client.post(MESSAGES, json=body, headers=auth(token))
    assert response.status_code == 422, response.get_json()
    error = response.get_json()["errors"][field]
    assert repr(first_entry(value)) in error and "is not an email address" in error
    assert stored() == 0


@pytest.mark.parametrize("value", SMUGGLED)
def test_a_form_or_multipart_entry_of_two_addresses_is_422_naming_it(client, token, value):
    form = {"to": value, "subject": "Hi", "text": "Hi"}
    response = client.post(MESSAGES, data=form, headers=auth(token))
    assert response.status_code == 422
    assert repr(first_entry(value)) in response.get_json()["errors"]["to"]
    body, content_type = multipart(form)
    response = client.post(MESSAGES, data=body, content_type=content_type, headers=auth(token))
    assert response.status_code == 422
    assert repr(first_entry(value)) in response.get_json()["errors"]["to"]
    assert stored() == 0


def test_a_batch_with_one_smuggled_entry_stores_nothing_and_names_it(client, token):
    good = {"to": "ann@example.com", "subject": "Hi", "text": "Hi"}
    bad = {**good, "cc": SMUGGLED[0]}
    response = client.post(f"{MESSAGES}/batch", json={"messages": [good, bad]},
                           headers=auth(token))  # fmt: skip
    assert response.status_code == 422
    (problem,) = response.get_json()["errors"]
    assert (problem["index"], problem["field"]) == (1, "cc")
    assert repr(SMUGGLED[0]) in problem["error"]
    assert stored() == 0


@pytest.mark.parametrize("value, expected", [
    ("ann@example.com, Bob <bob@example.org>", ["ann@example.com", "Bob <bob@example.org>"]),
    ('"Doe, Ann" <ann@example.com>,bob@example.org,',
     ['"Doe, Ann" <ann@example.com>', "bob@example.org"]),
    ("Dr. Ann <ann@example.com>", ['"Dr. Ann" <ann@example.com>']),
    ("ann@example.com (Ann)", ["Ann <ann@example.com>"]),
])  # fmt: skip
def test_a_comma_separated_list_still_gives_each_of_its_addresses(client, token, value, expected):
    response = client.post(MESSAGES, json={"to": value, "text": "Hi"}, headers=auth(token))
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["to"] == expected


@pytest.mark.parametrize("value", SMUGGLED[:3])
def test_the_compose_page_refuses_an_entry_of_two_addresses_beside_the_field(signed_in, value):
    form = {"csrf_token": csrf(signed_in), "to": value, "text": "Hi"}
    response = signed_in.post("/messages/new", data=form)
    assert response.status_code == 422
    error = parse(response).find("p", id="to-error").text
    assert repr(first_entry(value)) in error
    assert stored() == 0


def test_what_the_api_answers_names_the_whole_entry_even_when_json_escaped(client, token):
    value = '"Ann" <ann@example.com> <evil@attacker.example>'
    response = client.post(MESSAGES, data=json.dumps({"to": value, "text": "Hi"}),
                           content_type="application/json", headers=auth(token))  # fmt: skip
    assert response.status_code == 422
    assert repr(value) in response.get_json()["errors"]["to"]
