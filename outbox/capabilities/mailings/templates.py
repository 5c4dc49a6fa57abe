"""A mailing's templates: checked at creation, compiled once per process, rendered per recipient.

Templates run in Jinja2's sandbox with StrictUndefined: an unsafe attribute
(`''.__class__`) or a field the recipient lacks is an error, never an empty string.
HTML is autoescaped, the subject and the text body are not. Each recipient's mail is
rendered within a budget of steps, time and size (sandbox.Budget).
"""

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, StrictUndefined, TemplateError, TemplateSyntaxError, meta, nodes

from outbox.capabilities.mailings.sandbox import BoundedSandbox, Budget, running
from outbox.core.schema import LINE_CHARS

# The templates of a mailing by the field that carries them on the wire.
TEMPLATE_FIELDS = ("subject", "text", "html", "unsubscribe_url")
# Variables every recipient has beside its own fields, and what each is; a field may not
# take one's name (it would be hidden at send time).
BUILTIN_VARIABLES = {
    "email": "the recipient's own address",
    "name": "the recipient's own name (give it as the recipient's \"name\")",
    "unsubscribe_token": "the recipient's unsubscribe token, made at send time",
}
# Compiled mailings each process keeps (a mailing's templates are a few KB to a few MB).
CACHE_SIZE = 32

_plain = BoundedSandbox(undefined=StrictUndefined, autoescape=False)
_html = BoundedSandbox(undefined=StrictUndefined, autoescape=True)
_reader = Environment(autoescape=False)  # parses only: the tree as written, not as run
DELIMITERS = ("{{", "{%", "{#")


class TemplateProblem(Exception):
    """A template that cannot be compiled or rendered; field names the template."""

    def __init__(self, field: str, error: str) -> None:
        super().__init__(f"{field}: {error}")
        self.field, self.error = field, error


def _environment(field: str) -> BoundedSandbox:
    return _html if field == "html" else _plain


def _parsed(field: str, source: str) -> nodes.Template:
    try:
        return _environment(field).parse(source)
    except TemplateSyntaxError as exc:
        raise TemplateProblem(field, f"line {exc.lineno}: {exc.message}") from None


def variables(sources: Mapping[str, str | None]) -> dict[str, frozenset[str]]:
    """The recipient fields each template uses; TemplateProblem naming a syntax error's line."""
    found = {}
    for field, source in sources.items():
        if source:
            used = meta.find_undeclared_variables(_parsed(field, source))
            used -= {*_environment(field).globals, *BUILTIN_VARIABLES}
            found[field] = frozenset(used)
    return found


@dataclass(frozen=True)
class Compiled:
    """A mailing's templates ready to render, by field."""

    templates: dict[str, Any]

    def render(self, values: Mapping[str, Any], longest: int) -> dict[str, str | None]:
        """Each template rendered with values, all of them within one Budget whose output
        is at most longest characters; TemplateProblem naming the field if one fails."""
        rendered: dict[str, str | None] = dict.fromkeys(TEMPLATE_FIELDS)
        budget = Budget(longest)
        done = running(budget)
        try:
            for field, template in self.templates.items():
                try:
                    rendered[field] = "".join(map(budget.write, template.generate(values)))
                except (TemplateError, ArithmeticError, TypeError, ValueError,
                        RecursionError, MemoryError) as exc:  # fmt: skip
                    raise TemplateProblem(field, f"{type(exc).__name__}: {exc}") from None
        finally:
            done()
        return rendered


def oversize(texts: Mapping[str, str | None], attached: int, limit: int) -> str | None:
    """Why a rendered mail is past the size limit, or None: its bodies and attachments, as
    Draft.size counts a message's."""
    size = attached + sum(len((texts.get(f) or "").encode()) for f in ("text", "html"))
    if size <= limit:
        return None
    return f"the mail rendered is {size:,} bytes, past OUTBOX_MAX_MESSAGE_BYTES ({limit:,})"


def compile_templates(sources: Mapping[str, str | None]) -> Compiled:
    """The templates compiled; TemplateProblem for a syntax error."""
    compiled = {}
    for field, source in sources.items():
        if source:
            try:
                compiled[field] = _environment(field).from_string(source)
            except TemplateSyntaxError as exc:
                raise TemplateProblem(field, f"line {exc.lineno}: {exc.message}") from None
    return Compiled(compiled)


class Cache:
    """The compiled templates of the mailings a process sent lately, least recently used out."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size, self._lock = size, threading.Lock()
        self._found: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any) -> Any:
        with self._lock:
            if key in self._found:
                self._found.move_to_end(key)
                return self._found[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._found[key] = value
            self._found.move_to_end(key)
            while len(self._found) > self.size:
                self._found.popitem(last=False)


class Subject:
    """A mailing's subject as each recipient's row stores it, for the list, the API and
    search: the template itself when it has no template syntax, or rendered with the
    recipient's values.

    Rows are written a chunk at a time at intake, where a full sandboxed render of every
    recipient's subject would cost about as much again as the rest of a row. A subject
    made only of text and `{{ name }}` outputs (the usual "News for {{ first }}") is
    joined here directly, as Jinja2 would print it (str of each value); any other is
    rendered in the sandbox. One using the unsubscribe token (made at send time), or
    that fails for a recipient, is stored as its template: the worker renders the mail.
    """

    def __init__(self, source: str | None, longest: int) -> None:
        self.source, self.longest = source or "", longest
        self.parts: list[tuple[bool, str]] | None = None  # (is a variable, text or name)
        self.compiled: Compiled | None = None
        self.fixed = not any(mark in self.source for mark in DELIMITERS)
        if self.fixed:
            return
        try:
            tree = _reader.parse(self.source)
        except TemplateSyntaxError:
            self.fixed = True  # refused at intake already; the template is what it is
            return
        if "unsubscribe_token" in meta.find_undeclared_variables(tree):
            self.fixed = True
            return
        self.parts = _plain_parts(tree)

    def of(self, values: Mapping[str, Any]) -> str:
        """The subject a recipient with these values gets, cut to a subject's width."""
        if self.fixed:
            return self.source
        if self.parts is not None and all(name in values for var, name in self.parts if var):
            found = "".join(str(values[text]) if var else text for var, text in self.parts)
        else:
            found = self._rendered(values)
        return found[:LINE_CHARS]

    def _rendered(self, values: Mapping[str, Any]) -> str:
        """The subject rendered in the sandbox; the template if it fails."""
        if self.compiled is None:
            self.compiled = compile_templates({"subject": self.source})
        try:
            return self.compiled.render(values, self.longest)["subject"] or ""
        except TemplateProblem:
            return self.source


def _plain_parts(tree: nodes.Template) -> list[tuple[bool, str]] | None:
    """The template as (is a variable, text or name) when it is only text and `{{ name }}`
    outputs, else None."""
    parts: list[tuple[bool, str]] = []
    for node in tree.body:
        if not isinstance(node, nodes.Output):
            return None
        for item in node.nodes:
            if isinstance(item, nodes.TemplateData):
                parts.append((False, item.data))
            elif isinstance(item, nodes.Name) and item.ctx == "load":
                parts.append((True, item.name))
            else:
                return None
    return parts
