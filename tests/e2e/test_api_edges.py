"""The API served for real, asked with curl: empty times are refused, 415s are declared."""

import json
import subprocess
from typing import Any

from outbox.api import openapi
from outbox.auth import tokens
from tests.support.client_served import Served


def curl(served: Served, token: str, path: str, *options: str) -> tuple[int, Any]:  # noqa: F811
    """The status and JSON answer of curl asking served for path."""
    command = ["curl", "--silent", "--max-time", "60", "--write-out", "\n%{http_code}",
               "-H", f"Authorization: Bearer {token}", *options, f"{served.url}{path}"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=True)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), json.loads(body) if body else None


def test_an_empty_time_is_refused_naming_the_field_not_taken_as_none(served):  # noqa: F811
    token = tokens.create("edges", ["read", "send", "manage"])
    for query in ("until=", "since=", "until=%20"):
        status, answer = curl(served, token, f"/api/messages?{query}")
        name = query.partition("=")[0]
        assert status == 422 and "ISO 8601" in answer["errors"][name], (query, answer)
    entry = {"address": "gone@example.org", "reason": "asked us to stop", "expires_at": ""}
    status, answer = curl(served, token, "/api/suppressions", "--json", json.dumps(entry))
    assert status == 422 and "ISO 8601" in answer["errors"]["expires_at"], answer
    status, answer = curl(served, token, "/api/suppressions", "--json",
                          json.dumps({**entry, "expires_at": None}))  # fmt: skip
    assert status == 201 and answer["expires_at"] is None, answer


def test_every_operation_that_answers_415_declares_it(served):  # noqa: F811
    """Each operation that takes a body is sent one of a type nothing takes."""
    token = tokens.create("edges", ["read", "send", "manage"])
    unsupported = 0
    for path, item in openapi.document()["paths"].items():
        for method, operation in item.items():
            if "requestBody" not in operation:
                continue
            url = path.replace("{id}", "1").replace("{address}", "ann@example.org")
            status, answer = curl(served, token, url, "-X", method.upper(),
                                  "-H", "Content-Type: text/plain", "--data", "hello")  # fmt: skip
            if status == 415:
                unsupported += 1
                assert "415" in operation["responses"], (method, path, answer)
    assert unsupported >= 4
