"""The docs' webhook receiver, served as it is written, taking outbox's deliveries."""

import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from flask import Flask
from sqlalchemy import select
from werkzeug.serving import make_server

from outbox.api import openapi
from outbox.capabilities.webhooks import endpoints, run_due
from outbox.models import WebhookDelivery, utcnow
from outbox.models.db import db
from outbox.worker import Worker

PAGE = Path(__file__).parents[2] / "docs" / "capabilities" / "webhooks.md"


def recipe() -> str:
    """The Flask receiver's code block in the docs' Webhooks page."""
    text = PAGE.read_text()
    after = text[text.index("A receiver, in a few lines of Flask") :]
    found = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert found, "no python block after the receiver's sentence"
    return found[1]


class Served:
    """A real port that serves the recipe once load() has run it with a secret, and the
    events its handle() saw."""

    def __init__(self) -> None:
        self.module: dict[str, Any] = {}
        self.handled: list[dict[str, Any]] = []
        self.fail_next: set[str] = set()  # kinds whose next handling raises
        self.server = make_server("127.0.0.1", 0, self.wsgi, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever)
        self.thread.start()

    def wsgi(self, environ: Any, start_response: Any) -> Any:
        return self.module["app"](environ, start_response)

    def load(self, secret: str) -> None:
        """Run the docs' block with the secret outbox printed in its place."""
        code = recipe()
        assert code.count('"whsec_..."') == 1  # where the docs say to put the secret
        self.module.update(__name__="receiver")
        exec(compile(code.replace("whsec_...", secret), "docs receiver", "exec"), self.module)
        own = self.module["handle"]

        def handle(event: dict[str, Any]) -> None:
            if event["type"] in self.fail_next:
                self.fail_next.discard(event["type"])
                raise RuntimeError("the app's database is down")
            own(event)
            self.handled.append(event)

        self.module["handle"] = handle  # the view looks it up when called

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hooks/outbox"

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join()


@pytest.fixture
def served(smtp_app: Flask) -> Iterator[Served]:
    smtp_app.config["WEBHOOK_ALLOW_PRIVATE"] = True  # the receiver is on loopback
    found = Served()
    yield found
    found.stop()


def test_the_docs_receiver_takes_the_test_event_and_a_failed_handling_is_retried(
    smtp_app, smtp, make_message, served, capsys
):
    endpoint, secret = endpoints.add(served.url)
    served.load(secret)
    endpoints.send_test(endpoint.id)
    message = make_message()
    Worker().drain()
    served.fail_next.add("message.sent")
    first = run_due("w")
    assert (first.delivered, first.retrying) == (1, 1)  # the test event; the sent one failed
    assert [e["type"] for e in served.handled] == ["webhook.test"]
    again = run_due("w", now=utcnow() + timedelta(seconds=6))  # its first retry is due
    assert (again.delivered, again.retrying) == (1, 0)
    assert [e["type"] for e in served.handled] == ["webhook.test", "message.sent"]
    assert served.handled[1]["data"]["id"] == message.id  # handled, not skipped as seen
    printed = capsys.readouterr().out
    assert "webhook.test None a test event from outbox" in printed
    assert f"message.sent {message.id} " in printed
    rows = db.session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)).all()
    assert [(r.kind, r.status, r.attempts) for r in rows] == [
        ("webhook.test", "delivered", 1), ("message.sent", "delivered", 2)
    ]  # fmt: skip
    schema = openapi.document()["components"]["schemas"]["WebhookEvent"]
    for event in served.handled:
        jsonschema_rs.validate(schema, event)
