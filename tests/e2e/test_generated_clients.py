"""Clients generated from the served OpenAPI document: openapi-python-client's, used against
the API served for real, and openapi-typescript's types, held to a program by tsc."""

import importlib
import io
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from outbox.api.openapi.examples import EXAMPLES
from outbox.auth import tokens
from tests.support.client_served import Served

BIN = Path(sys.executable).parent
NODE = Path(__file__).parents[1] / "typescript"  # its package.json: openapi-typescript, typescript
PACKAGE = "outbox_generated"


def _document(served: Served, token: str, folder: Path) -> Path:  # noqa: F811
    """The document as the served app answers it, saved in folder."""
    request = urllib.request.Request(
        f"{served.url}/api/openapi.json", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        found = folder / "openapi.json"
        found.write_bytes(answer.read())
    return found


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command[0]}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture
def generated(served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:  # noqa: F811
    """The Python client openapi-python-client makes of the served document, imported."""
    document = _document(served, tokens.create("generator", ["read"]), tmp_path)
    command = [str(BIN / "openapi-python-client"), "generate", "--path", str(document),
               "--meta", "none", "--output-path", str(tmp_path / PACKAGE)]  # fmt: skip
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ['PATH']}")  # for its ruff post-hook
    _run(command, tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(PACKAGE)
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


def _api(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.api.default.{name}")


def test_the_generated_python_client_sends_lists_reads_resends_and_uploads(generated, served):  # noqa: F811
    from outbox_generated.models import (
        Message,
        MessageDetail,
        MessagePage,
        Moved,
        NewMessage,
        NewMessageForm,
        NewMessageUpload,
    )
    from outbox_generated.types import File

    token = tokens.create("typed", ["read", "send", "manage"])
    with generated.AuthenticatedClient(base_url=served.url, token=token, timeout=30) as client:
        body = NewMessage.from_dict(EXAMPLES["NewMessage"])
        sent = _api("post_api_messages").sync(client=client, body=body)
        assert isinstance(sent, Message), sent
        assert (sent.to, sent.subject, sent.from_) == (["ann@example.org"], body.subject,
                                                       "shop@example.com")  # fmt: skip
        assert sent.metadata.to_dict() == {"order": "1234"}

        form = NewMessageForm(to=["bo@example.net", "cy@example.net"], text="By form.")
        by_form = _api("post_api_messages").sync(client=client, body=form)
        assert isinstance(by_form, Message) and by_form.to == form.to, by_form

        page = _api("get_api_messages").sync(client=client, limit=10)
        assert isinstance(page, MessagePage) and page.next_ is None
        assert [m.id for m in page.messages] == [by_form.id, sent.id]

        cancelled = _api("post_api_messages_id_cancel").sync(sent.id, client=client)
        assert isinstance(cancelled, Moved) and cancelled.status == "cancelled", cancelled
        resent = _api("post_api_messages_id_resend").sync(sent.id, client=client)
        assert isinstance(resent, Moved) and resent.status == "queued", resent

        notes = File(payload=io.BytesIO(b"two\nlines\n"), file_name="notes.txt",
                     mime_type="text/plain")  # fmt: skip
        upload = NewMessageUpload(to=["dee@example.org"], subject="Notes", text="Attached.",
                                  attachments=[notes])  # fmt: skip
        uploaded = _api("post_api_messages").sync(client=client, body=upload)
        assert isinstance(uploaded, Message) and uploaded.subject == "Notes", uploaded
        detail = _api("get_api_messages_id").sync(uploaded.id, client=client)
        assert isinstance(detail, MessageDetail), detail
        attached = [(a.filename, a.content_type, a.size) for a in detail.attachments]
        assert attached == [("notes.txt", "text/plain", 10)]


def test_the_generated_python_models_read_every_example(generated):
    models = importlib.import_module(f"{PACKAGE}.models")
    for name, example in EXAMPLES.items():
        model = getattr(models, name)
        assert model.from_dict(example).to_dict().keys() == example.keys(), name


TYPED_PROGRAM = """
import type { components, paths } from "./api";

type Schemas = components["schemas"];
const message: Schemas["NewMessage"] = {
  to: ["ann@example.org"], subject: "Hi", text: "Hello", metadata: { order: "1" },
};
type Created = paths["/api/messages"]["post"]["responses"][201]["content"]["application/json"];
export const shown = (m: Created): string => `${m.id} ${m.status} ${m.to.join(", ")}`;
type Page = paths["/api/messages"]["get"]["responses"][200]["content"]["application/json"];
export const ids = (page: Page): number[] => page.messages.map((m) => m.id);
export const codes = (d: Schemas["MessageDetail"]): (number | null)[] =>
  d.attempt_log.map((a) => a.smtp_code);
const upload: Schemas["NewMessageUpload"] = { to: ["bo@example.net"], text: "See the file." };
// @ts-expect-error a field a message does not have
const misspelt: Schemas["NewMessage"] = { to: "ann@example.org", subjet: "Hi" };
// @ts-expect-error to is required
const nobody: Schemas["NewMessage"] = { text: "Hello" };
export const all = [message, upload, misspelt, nobody];
"""


def test_openapi_typescript_types_hold_a_program_and_every_example(tmp_path, served):  # noqa: F811
    node = NODE / "node_modules" / ".bin"
    if not (node / "tsc").exists():
        _run(["npm", "ci", "--no-audit", "--no-fund"], NODE)  # as .ci/run does
    document = _document(served, tokens.create("generator", ["read"]), tmp_path)
    _run([str(node / "openapi-typescript"), str(document), "-o", "api.d.ts"], tmp_path)
    examples = [f"export const example{i}: Schemas[{json.dumps(name)}] = {json.dumps(value)};"
                for i, (name, value) in enumerate(EXAMPLES.items())]  # fmt: skip
    (tmp_path / "program.ts").write_text(TYPED_PROGRAM + "\n".join(examples) + "\n")
    _run([str(node / "tsc"), "--noEmit", "--strict", "--target", "es2022", "--module",
          "esnext", "--moduleResolution", "bundler", "program.ts"], tmp_path)  # fmt: skip
