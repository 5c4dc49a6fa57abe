"""The OpenAPI document's message schemas, derived from the schema, without a database."""

import re
from collections.abc import Iterator
from typing import Any

import jsonschema_rs

from outbox.api import openapi
from outbox.core import schema


def bodies() -> dict[str, dict]:
    content = openapi.document()["paths"]["/api/messages"]["post"]["requestBody"]["content"]
    components = openapi.document()["components"]["schemas"]
    return {kind: components[body["schema"]["$ref"].rpartition("/")[2]]
            for kind, body in content.items()}  # fmt: skip


def media_types() -> Iterator[tuple[str, dict[str, Any]]]:
    """Each request and answer body of the document, named by operation and status."""
    for path, item in openapi.document()["paths"].items():
        for method, operation in item.items():
            answers = {"request": operation.get("requestBody", {}), **operation["responses"]}
            for status, answer in answers.items():
                for kind, media in answer.get("content", {}).items():
                    yield f"{method.upper()} {path} {status} {kind}", media


def test_the_json_body_is_the_schema_and_the_batch_holds_it_too():
    document = openapi.document()
    components = document["components"]["schemas"]
    assert bodies()["application/json"] == components["NewMessage"]
    assert set(components["NewMessage"]["properties"]) == set(schema.WIRE_NAMES.values())
    assert {"Attachment", "Message", "Status"} <= set(components)
    batch = document["paths"]["/api/messages/batch"]["post"]["requestBody"]["content"]
    assert batch["application/json"]["schema"] == {"$ref": "#/components/schemas/NewBatch"}
    items = components["NewBatch"]["properties"]["messages"]["items"]
    assert items == {"$ref": "#/components/schemas/NewMessage"}


def test_forms_send_text_repeat_lists_and_send_files_only_in_multipart():
    form, multipart = bodies()["application/x-www-form-urlencoded"], bodies()["multipart/form-data"]
    assert set(multipart["properties"]) == set(schema.FORM_KINDS)
    assert set(form["properties"]) == set(schema.FORM_KINDS) - {"attachments"}
    assert form["required"] == ["to"]
    to, cc = form["properties"]["to"], form["properties"]["cc"]
    assert (to["type"], to["minItems"], to["items"]["format"]) == ("array", 1, "email")
    assert cc["type"] == "array" and "minItems" not in cc
    assert form["properties"]["subject"]["type"] == "string"
    assert multipart["properties"]["attachments"]["items"]["format"] == "binary"


def test_a_priority_in_a_form_is_digits_that_are_always_in_range():
    pattern = re.compile(bodies()["multipart/form-data"]["properties"]["priority"]["pattern"])
    low, high = schema.PRIORITY_RANGE
    assert all(pattern.match(v) for v in ("0", "+5", "-999999", "999999"))
    assert not any(pattern.match(v) for v in (str(low), str(high), "1e3", " 5"))


def test_the_listing_and_the_detail_are_described():
    document = openapi.document()
    schemas = document["components"]["schemas"]
    listing = document["paths"]["/api/messages"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert names == {"status", "stream", "recipient", "source", "since", "until", "before",
                     "limit"}  # fmt: skip
    assert set(listing["responses"]) == {"200", "401", "403", "422", "503"}
    detail = schemas["MessageDetail"]["properties"]
    assert {"cc", "bcc", "reply_to", "attachments", "attempt_log", "recipients"} <= set(detail)
    assert set(schemas["AttemptInfo"]["properties"]) == {
        "started_at", "finished_at", "outcome", "smtp_code", "error", "reply", "route"}  # fmt: skip
    assert "content" not in schemas["AttachmentInfo"]["properties"]
    nullable = schemas["Message"]["properties"]["next_attempt_at"]["anyOf"]
    assert {"type": "null"} in nullable


def test_unknown_fields_and_other_content_types_are_described_as_refused():
    document = openapi.document()
    assert document["components"]["schemas"]["NewMessage"]["additionalProperties"] is False
    for form in (bodies()["application/x-www-form-urlencoded"], bodies()["multipart/form-data"]):
        assert form["additionalProperties"] is False
    for path in ("/api/messages", "/api/messages/batch"):
        responses = document["paths"][path]["post"]["responses"]
        assert "415" in responses and "Accept" in responses["415"]["headers"]


def test_no_body_is_a_union_at_the_top_nor_has_a_format_of_its_own():
    """Code generators make a top-level anyOf a union that drops the other fields, and
    neither they nor fuzzers can make a value of a format they do not know."""
    document = openapi.document()
    known = {"email", "date-time", "byte", "binary"}
    for name, found in document["components"]["schemas"].items():
        assert not {"anyOf", "oneOf", "allOf"} & set(found) or "properties" not in found, name
    formats = set(re.findall(r"'format': '([^']+)'", str(document)))
    assert formats <= known, formats - known


def test_an_object_without_named_properties_says_it_takes_any():
    """openapi-typescript types a bare {"type": "object"} as one that holds nothing."""
    bare = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{where}/{i}")
        elif isinstance(node, dict):
            if node.get("type") == "object" and not {"properties", "additionalProperties"} & set(
                node
            ):
                bare.append(where)
            for key, value in node.items():
                if key != "example":
                    walk(value, f"{where}/{key}")

    walk(openapi.document(), "")
    assert bare == []


def test_every_request_and_answer_has_an_example_its_schema_takes():
    components = openapi.document()["components"]
    seen = 0
    for name, media in media_types():
        assert "example" in media, name
        validator = jsonschema_rs.validator_for(
            {"components": components, **media["schema"]}, validate_formats=True
        )
        assert [e.message for e in validator.iter_errors(media["example"])] == [], name
        seen += 1
    assert seen > 50
