"""Helpers for the staff-page tests: reading pages, CSRF tokens, messages in a given status."""

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

from outbox import queue
from outbox.core.status import Retry, Status
from outbox.models import Message, utcnow
from outbox.models.db import db

from . import outcomes

PASSWORD = "correct horse"


RETRY = Retry(delay=60, backoff=2, max_delay=3600)
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}  # fmt: skip


@dataclass(eq=False)
class Element:
    """One element of a parsed page; text and attribute values are unescaped."""

    tag: str
    attrs: dict[str, str]
    children: list["Element | str"] = field(default_factory=list)

    def __getitem__(self, name: str) -> str:
        return self.attrs[name]

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.attrs.get(name, default)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def iter(self) -> Iterator["Element"]:
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag: str | None = None, **attrs: str) -> list["Element"]:
        """Elements with this tag and these attribute values (class_ matches one class)."""
        found = []
        for element in self.iter():
            if tag is not None and element.tag != tag:
                continue
            wanted = dict(attrs)
            if "class_" in wanted and wanted.pop("class_") not in element.classes:
                continue
            if all(element.attrs.get(k.replace("_", "-")) == v for k, v in wanted.items()):
                found.append(element)
        return found

    def find(self, tag: str | None = None, **attrs: str) -> "Element":
        """The one element that matches; fails the test if there is none or several."""
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, f"{len(found)} <{tag} {attrs}> elements"
        return found[0]

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.open[-1].children.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth].tag == tag:
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.open[-1].children.append(data)


def parse(response_or_html) -> Element:  # type: ignore[no-untyped-def]
    """A page (or a response's page) as a tree of elements."""
    html = response_or_html
    if not isinstance(html, str):
        html = response_or_html.get_data(as_text=True)
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


def csrf(client, path: str = "/messages/new") -> str:  # type: ignore[no-untyped-def]
    """The CSRF token of the hidden input on a page, as a form posts it."""
    page = client.get(path)
    assert page.status_code == 200, page.status_code
    (token,) = {i["value"] for i in parse(page).find_all("input", name="csrf_token")}
    return token


def htmx(client, path: str = "/") -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The headers htmx sends from a page: HX-Request and the layout's hx-headers."""
    page = client.get(path)
    assert page.status_code == 200, page.status_code
    headers = json.loads(parse(page).find("body")["hx-headers"])
    assert set(headers) == {"X-CSRFToken"}
    return {"HX-Request": "true", **headers}


def fresh(message_id: int) -> Message:
    db.session.expire_all()
    return db.session.get(Message, message_id)


def claim(message_id: int, worker_id: str = "w1", now=None) -> queue.Claim:  # type: ignore[no-untyped-def]
    """Claim one message the way a worker does, handing back any other due message."""
    claims = queue.claim_batch(worker_id, 1000, now=now)
    queue.release([c for c in claims if c.id != message_id])
    (mine,) = [c for c in claims if c.id == message_id]
    return mine


def move_to(message: Message, status: Status, error: str = "550 5.1.1 no such user") -> int:
    """Take a queued message to status through the queue's own moves; its id."""
    now = utcnow()
    if status is Status.CANCELLED:
        queue.cancel(message.id)
    elif status is not Status.QUEUED:
        held = claim(message.id, now=now)
        if status is Status.DEFERRED:
            outcomes.deferred(held, now, 451, "451 4.7.1 try later", RETRY)
        elif status is Status.FAILED:
            outcomes.failed(held, now, 550, error)
        elif status is Status.SENT:
            outcomes.sent(held, now)
    assert fresh(message.id).status == status
    return message.id


def sign_in_form(client, email: str = "staff@example.com", password: str = PASSWORD) -> dict:
    return {"csrf_token": csrf(client, "/sign-in"), "email": email, "password": password}


def sign_in_target(location: str) -> str | None:
    """The next= of a redirect to the sign-in page, if it has one."""
    parts = urlsplit(location)
    assert parts.path == "/sign-in", location
    return parse_qs(parts.query).get("next", [None])[0]


def facts(dl: Element) -> dict[str, str]:
    """A <dl> as term -> description text."""
    items = [c for c in dl.children if isinstance(c, Element)]
    return {
        dt.text.strip(): dd.text.strip() for dt, dd in zip(items[::2], items[1::2], strict=True)
    }


def field_box(page: Element, name: str) -> Element:
    """The <div class="field"> holding the form field name."""
    (box,) = [d for d in page.find_all("div", class_="field") if d.find_all(id=name)]
    return box


def shown_value(control: Element) -> str:
    """What a form control holds; a browser drops the newline that opens a textarea."""
    if control.tag == "textarea":
        return control.text.removeprefix("\r\n").removeprefix("\n")
    return control["value"]


def as_role(app, staff, role: str):
    """A test client signed in as the staff account, given this role."""
    staff.role = role
    db.session.commit()
    client = app.test_client()
    with client.session_transaction() as session:
        session["_user_id"] = staff.get_id()
        session["_fresh"] = True
    return client


def compose(client, **fields):  # type: ignore[no-untyped-def]
    """The compose form posted with a valid CSRF token; fields override its defaults."""
    form = {"csrf_token": csrf(client), "to": "ann@example.com", "text": "Hi", **fields}
    return client.post("/messages/new", data=form)


def notice_of(response) -> dict[str, object] | None:  # type: ignore[no-untyped-def]
    """The notice an htmx answer carries in its HX-Trigger header (outbox.web.notice)."""
    header = response.headers.get("HX-Trigger")
    return json.loads(header)["outbox:notice"] if header else None
