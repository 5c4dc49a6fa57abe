"""The OpenAPI document's message schemas, derived from the schema, without a database."""

import re

from outbox import openapi, schema


def bodies() -> dict[str, dict]:
    content = openapi.document()["paths"]["/api/messages"]["post"]["requestBody"]["content"]
    return {kind: body["schema"] for kind, body in content.items()}


def test_the_json_body_is_the_schema_and_the_batch_holds_it_too():
    document = openapi.document()
    components = document["components"]["schemas"]
    assert bodies()["application/json"] == {"$ref": "#/components/schemas/NewMessage"}
    assert set(components["NewMessage"]["properties"]) == set(schema.WIRE_NAMES.values())
    assert {"Attachment", "Message", "Status"} <= set(components)
    batch = document["paths"]["/api/messages/batch"]["post"]["requestBody"]["content"]
    items = batch["application/json"]["schema"]["properties"]["messages"]["items"]
    assert items == {"$ref": "#/components/schemas/NewMessage"}


def test_forms_send_text_repeat_lists_and_send_files_only_in_multipart():
    form, multipart = bodies()["application/x-www-form-urlencoded"], bodies()["multipart/form-data"]
    assert set(multipart["properties"]) == set(schema.FORM_KINDS)
    assert set(form["properties"]) == set(schema.FORM_KINDS) - {"attachments"}
    assert form["required"] == ["to"] and len(form["anyOf"]) == 2
    to, cc = form["properties"]["to"], form["properties"]["cc"]
    assert (to["type"], to["minItems"], to["items"]["format"]) == ("array", 1, "mailbox-list")
    assert cc["type"] == "array" and "minItems" not in cc
    assert form["properties"]["subject"]["type"] == "string"
    assert multipart["properties"]["attachments"]["items"]["contentMediaType"]


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
    assert names == {"status", "recipient", "source", "since", "until", "before", "limit"}
    assert set(listing["responses"]) == {"200", "401", "422", "503"}
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
