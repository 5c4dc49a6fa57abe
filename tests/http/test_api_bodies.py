"""What the API takes as a body: known fields only, the content types it names, its limits."""

import io
import json

import pytest
from flask import Flask

from outbox import config, create_app
from outbox.auth import tokens
from tests.support.api import BATCH, MESSAGES, VALID, auth, nothing_stored, stored
from tests.support.app import base_config

ACCEPTED = ["application/json", "application/x-www-form-urlencoded", "multipart/form-data"]


@pytest.fixture
def token(app) -> str:
    return tokens.create("shop")


def test_an_unknown_field_among_valid_ones_is_422_and_queues_nothing(client, token):
    body = {**VALID, "subjet": "Your order", "Text": "x", "to_addr": "a@example.com"}
    response = client.post(MESSAGES, json=body, headers=auth(token))
    assert response.status_code == 422
    answer = response.get_json()
    assert answer["error"] == "the message was not queued"
    assert answer["errors"] == {
        "subjet": "is not a field of a message; did you mean subject?",
        "Text": "is not a field of a message; did you mean text?",
        "to_addr": "is not a field of a message",
    }
    assert nothing_stored()


def test_unknown_fields_are_named_with_the_other_bad_ones(client, token):
    body = {"to": "nobody", "text": "hi", "bogus": 1}
    response = client.post(MESSAGES, json=body, headers=auth(token))
    assert response.status_code == 422
    assert set(response.get_json()["errors"]) == {"to", "bogus"}


def test_an_unknown_form_field_is_422(client, token):
    form = {**VALID, "subjet": "Your order"}
    response = client.post(MESSAGES, data=form, headers=auth(token))
    assert response.status_code == 422
    assert set(response.get_json()["errors"]) == {"subjet"}
    assert nothing_stored()


def test_an_unknown_multipart_field_or_file_is_422(client, token):
    data = {**VALID, "subjet": "x", "attachment": (io.BytesIO(b"hi"), "a.txt"),
            "text_file": (io.BytesIO(b"hi"), "b.txt")}  # fmt: skip
    response = client.post(MESSAGES, data=data, headers=auth(token))
    assert response.status_code == 422
    errors = response.get_json()["errors"]
    assert errors["attachment"] == "is not a field of a message; did you mean attachments?"
    assert set(errors) == {"subjet", "attachment", "text_file"}
    data = {**VALID, "subject": (io.BytesIO(b"hi"), "a.txt")}
    response = client.post(MESSAGES, data=data, headers=auth(token))
    assert response.get_json()["errors"] == {"subject": "takes no file"}
    assert nothing_stored()


def test_an_unknown_field_in_a_batch_item_names_its_index(client, token):
    items = [VALID, {**VALID, "subjet": "x"}, VALID]
    response = client.post(BATCH, json={"messages": items}, headers=auth(token))
    assert response.status_code == 422
    assert response.get_json()["errors"] == [
        {"index": 1, "field": "subjet",
         "error": "is not a field of a message; did you mean subject?"}]  # fmt: skip
    response = client.post(BATCH, json={"messages": [VALID], "mesages": []}, headers=auth(token))
    assert response.status_code == 422
    unknown = {"field": "mesages", "error": "is not a field of a batch"}
    assert response.get_json()["errors"] == [unknown]
    assert nothing_stored()


@pytest.mark.parametrize(
    "content_type",
    ["application/json; charset=utf-8", "application/json;charset=UTF-8", "Application/JSON",
     'application/json; charset="utf-8"', "application/merge-patch+json"],
)  # fmt: skip
def test_json_with_parameters_or_in_any_case_is_taken(client, token, content_type):
    body = json.dumps({**VALID, "subject": "Grüße"}).encode()
    response = client.post(MESSAGES, data=body, content_type=content_type, headers=auth(token))
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["subject"] == "Grüße"


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "text/plain; charset=utf-8"])  # fmt: skip
@pytest.mark.parametrize("path", [MESSAGES, BATCH])
def test_json_sent_without_its_content_type_is_415_naming_the_accepted_ones(
    client, token, content_type, path
):
    body = json.dumps({"messages": [VALID]} if path == BATCH else VALID)
    response = client.post(path, data=body, content_type=content_type, headers=auth(token))
    assert response.status_code == 415
    answer = response.get_json()
    given = (content_type or "none").split(";")[0]
    assert f"looks like JSON but its Content-Type is {given}" in answer["error"]
    accepted = ACCEPTED if path == MESSAGES else ACCEPTED[:1]
    assert answer["accepted"] == accepted
    assert response.headers["Accept"] == ", ".join(accepted)
    assert "recipient" not in response.get_data(as_text=True)
    assert nothing_stored()


@pytest.mark.parametrize("content_type, data", [(None, "to=a@example.com&text=hi"),
                                                ("text/plain", "hello"),
                                                ("application/xml", "<to>a@example.com</to>"),
                                                ("text/json", "{}")])  # fmt: skip
def test_a_missing_or_unsupported_content_type_is_415(client, token, content_type, data):
    response = client.post(MESSAGES, data=data, content_type=content_type, headers=auth(token))
    assert response.status_code == 415
    assert ", ".join(ACCEPTED) in response.get_json()["error"]
    assert nothing_stored()


def test_forms_to_the_batch_endpoint_are_415(client, token):
    response = client.post(BATCH, data={"messages": "x"}, headers=auth(token))
    assert response.status_code == 415
    assert response.get_json()["accepted"] == ["application/json"]


def test_an_empty_post_without_a_content_type_is_415(client, token):
    response = client.post(MESSAGES, headers=auth(token))
    assert response.status_code == 415
    assert "Content-Type none is not accepted" in response.get_json()["error"]


@pytest.mark.parametrize("path", [MESSAGES, BATCH])
def test_a_request_over_the_limit_is_413_naming_it_in_bytes(app, client, token, path):
    app.config["MAX_CONTENT_LENGTH"] = 2048
    body = {**VALID, "text": "x" * 3000}
    body = {"messages": [body]} if path == BATCH else body
    response = client.post(path, json=body, headers=auth(token))
    assert response.status_code == 413
    assert response.is_json
    assert response.get_json() == {
        "error": "the request over the limit of 2048 bytes (OUTBOX_MAX_MESSAGE_BYTES)",
        "limit": 2048,
    }
    assert stored()["messages"] == 0


LOCAL = {**VALID, "to": ["Ann <ann@host.local>"], "cc": "b@mail.corp.local",
         "from": "app@host.local", "reply_to": "help@host.local"}  # fmt: skip


def test_special_use_domains_are_refused_by_default_naming_the_setting(client, token):
    response = client.post(MESSAGES, json=LOCAL, headers=auth(token))
    assert response.status_code == 422
    errors = response.get_json()["errors"]
    assert set(errors) == {"to", "cc", "from", "reply_to"}
    assert all("is not an email address" in e and "OUTBOX_ALLOWED_SPECIAL_DOMAINS" in e
               for e in errors.values())  # fmt: skip


def allowing(tmp_path, **extra: object) -> Flask:
    app = create_app(base_config(f"sqlite:///{tmp_path / 'x.sqlite3'}", **extra))
    app.instance_path = str(tmp_path)
    return app


def test_allowed_special_domains_are_taken_by_the_api(app, client, token, monkeypatch):
    app.config["ALLOWED_SPECIAL_DOMAINS"] = config.domain_names("local")
    response = client.post(MESSAGES, json=LOCAL, headers=auth(token))
    assert response.status_code == 201, response.get_json()
    answer = response.get_json()
    assert answer["to"] == ["Ann <ann@host.local>"] and answer["reply_to"] == "help@host.local"
    onion = client.post(MESSAGES, json={**VALID, "to": "a@b.onion"}, headers=auth(token))
    assert onion.status_code == 422


def test_the_setting_is_read_once_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OUTBOX_ALLOWED_SPECIAL_DOMAINS", " Local, .internal ,, ")
    app = create_app(base_config(f"sqlite:///{tmp_path / 'x.sqlite3'}"))
    assert app.config["ALLOWED_SPECIAL_DOMAINS"] == frozenset({"local", "internal"})
    for wrong in ("local", {"LOCAL"}, {".local"}, {""}, [5]):
        with pytest.raises(ValueError, match="ALLOWED_SPECIAL_DOMAINS"):
            create_app(base_config(f"sqlite:///{tmp_path / 'y.sqlite3'}",
                                   ALLOWED_SPECIAL_DOMAINS=wrong))  # fmt: skip
    given = base_config(f"sqlite:///{tmp_path / 'z.sqlite3'}", ALLOWED_SPECIAL_DOMAINS=["local"])
    assert create_app(given).config["ALLOWED_SPECIAL_DOMAINS"] == ["local"]


def test_the_compose_page_takes_them_too(app, signed_in):
    app.config["ALLOWED_SPECIAL_DOMAINS"] = frozenset({"local"})
    app.config["WTF_CSRF_ENABLED"] = False
    form = {"to": "ann@host.local", "sender": "app@host.local", "subject": "Hi", "text": "Hi",
            "priority": "0"}  # fmt: skip
    response = signed_in.post("/messages/new", data=form)
    assert response.status_code == 302, response.get_data(as_text=True)[:2000]
    app.config["ALLOWED_SPECIAL_DOMAINS"] = frozenset()
    response = signed_in.post("/messages/new", data=form)
    assert response.status_code == 422
    assert "is not an email address" in response.get_data(as_text=True)
