"""The sandbox mailing templates run in: Jinja2's, held to a budget of steps, time and size.

Jinja2's SandboxedEnvironment stops unsafe attribute access, not a template that loops
for ever or builds a string of gigabytes. Here each loop turn, call, filter and
intercepted operator is a step of the render's Budget, which also reads the clock; an
operator, call or filter that could make a value longer than the mail may be is refused
before it runs where its size can be known, and checked right after where it cannot; the
output is taken a piece at a time (templates.Compiled.render). A render past its budget
raises OverBudget, a TemplateError: the render fails with the reason within moments, so
a worker's lane comes back to its stop flag and its other recipients.
"""

import functools
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import TemplateRuntimeError
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import pass_eval_context
from jinja2.visitor import NodeTransformer

STEPS = 100_000  # loop turns, calls, filters and operators one recipient's mail may take
SECONDS = 2.0  # one recipient's mail, for steps slowed by long values
LONGEST = 25 * 1024 * 1024  # characters of a value when no render is running
# Items of a list, tuple, dict or set, and characters a filter that works in Python on
# each character or word takes (one call must end well within SECONDS: it is one step).
ITEMS = 100_000
POWER_BITS = 100_000  # the largest number ** may make, in bits
# str methods and filters whose number arguments set how long their result is.
METHOD_WIDTHS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs"})
FILTER_WIDTHS = frozenset({"center", "indent", "slice"})
SLOW_FILTERS = frozenset({"wordwrap", "urlize", "title", "striptags", "indent", "pprint"})
# str methods and filters that make an item of each character or word of a str.
SPLITTING = frozenset({"split", "rsplit", "splitlines", "list", "unique", "sort", "reverse",
                       "batch", "slice", "groupby", "map", "select", "reject"})  # fmt: skip
_PERCENT = re.compile(r"%[^a-zA-Z%]*")  # a %-format's field up to its conversion
_DIGITS = re.compile(r"\d+")


class OverBudget(TemplateRuntimeError):
    """A template that went past its render's budget; the message names the limit."""


@dataclass
class Budget:
    """What one recipient's mail may take to render: steps, seconds, and characters."""

    longest: int  # characters of the whole output, and of any one value
    steps: int = STEPS
    seconds: float = SECONDS
    left: int = field(init=False)
    deadline: float = field(init=False)
    written: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.left, self.deadline = self.steps, time.monotonic() + self.seconds

    def spend(self) -> None:
        """One step; OverBudget past the steps or the time."""
        self.left -= 1
        if self.left < 0:
            raise OverBudget(f"the template takes more than {self.steps:,} steps "
                             "(loop turns, calls, filters) for one recipient")  # fmt: skip
        if time.monotonic() > self.deadline:
            raise OverBudget(f"the template runs longer than {self.seconds:g} seconds "
                             "for one recipient")  # fmt: skip

    def write(self, piece: str) -> str:
        """A piece of output, counted; OverBudget past the size limit."""
        self.written += len(piece)
        if self.written > self.longest:
            raise OverBudget(f"the mail renders past the size limit, {self.longest:,} bytes")
        return piece


_current: ContextVar[Budget | None] = ContextVar("outbox_template_budget", default=None)


def running(budget: Budget) -> Callable[[], None]:
    """Hold budget as the running render's until the function returned is called."""
    token = _current.set(budget)
    return lambda: _current.reset(token)


def _spend() -> None:
    budget = _current.get()
    if budget is not None:  # no render running: Jinja's optimizer folding a constant
        budget.spend()


def _longest() -> int:
    budget = _current.get()
    return budget.longest if budget is not None else LONGEST


def _refuse_length(length: int) -> None:
    if length > (limit := _longest()):
        raise OverBudget(f"a value of {length:,} characters, past the mail size "
                         f"limit of {limit:,} bytes")  # fmt: skip


def _refuse_items(count: int) -> None:
    if count > ITEMS:
        raise OverBudget(f"a list of {count:,} items, past {ITEMS:,}")


def _sized(value: Any) -> Any:
    """value, if its length is within the limits."""
    if isinstance(value, str | bytes):
        _refuse_length(len(value))
    elif isinstance(value, list | tuple | dict | set | frozenset):
        _refuse_items(len(value))
    return value


def _refuse_numbers(values: Iterable[Any]) -> None:
    for value in values:
        if isinstance(value, int):
            _refuse_length(value)


def _refuse_format(text: Any, values: Iterable[Any], braces: bool) -> None:
    """Refuse a format string whose widths, or the values given for its *, are past the limit."""
    if not isinstance(text, str):
        return
    try:
        specs = ([spec for _, _, spec, _ in string.Formatter().parse(text) if spec] if braces
                 else _PERCENT.findall(text))  # fmt: skip
    except ValueError:  # not a format: the call's own error says so
        return
    _refuse_numbers(int(digits) for spec in specs for digits in _DIGITS.findall(spec))
    if any("*" in spec or "{" in spec for spec in specs):
        _refuse_numbers(values)


def _refuse_join(separator: Any, items: Any) -> None:
    if isinstance(separator, str) and isinstance(items, list | tuple):
        strings = sum(len(item) for item in items if isinstance(item, str))
        _refuse_length(len(separator) * max(len(items) - 1, 0) + strings)


def _refuse_replace(subject: Any, args: tuple[Any, ...]) -> None:
    """Refuse a str.replace whose result would be past the limit."""
    if not (isinstance(subject, str) and len(args) >= 2 and isinstance(args[0], str)
            and isinstance(args[1], str)):  # fmt: skip
        return
    old, new = args[0], args[1]
    times = subject.count(old) if old else len(subject) + 1
    _refuse_length(len(subject) + times * (len(new) - len(old)))


def _refuse_method(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse a str method call whose result would be past the limit, where that is known."""
    name = getattr(obj, "__name__", "")
    subject = getattr(getattr(obj, "__wrapped__", obj), "__self__", None)  # format: wrapped
    if not isinstance(subject, str):
        return
    if name in SPLITTING:
        _refuse_items(len(subject))
    elif name in METHOD_WIDTHS:
        _refuse_numbers([*args, *kwargs.values()])
    elif name == "format":
        _refuse_format(subject, [*args, *kwargs.values()], braces=True)
    elif name == "format_map" and args and isinstance(args[0], dict):
        _refuse_format(subject, list(args[0].values()), braces=True)
    elif name == "replace":
        _refuse_replace(subject, args)
    elif name == "join" and args:
        _refuse_join(subject, args[0])


def _refuse_filter(name: str, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse a filter whose result would be past the limit, where that is known."""
    if name in SPLITTING and isinstance(value, str):
        _refuse_items(len(value))
    if name in SLOW_FILTERS and isinstance(value, str) and len(value) > ITEMS:
        raise OverBudget(f"|{name} takes at most {ITEMS:,} characters, not {len(value):,}")
    if name in FILTER_WIDTHS:
        _refuse_numbers([*args, *kwargs.values()])
    elif name == "format":  # value % args
        _refuse_format(value, [*args, *kwargs.values()], braces=False)
    elif name == "replace":
        _refuse_replace(value, args)
    elif name == "join":
        _refuse_join(args[0] if args else kwargs.get("d", ""), value)


def _counted(iterable: Iterable[Any]) -> Iterator[Any]:
    """A loop's items, each a step."""
    for item in iterable:
        _spend()
        yield item


@pass_eval_context
def _joined(eval_ctx: Any, parts: list[Any]) -> str:
    """The ~ operator's concatenation, its length checked before it is made."""
    _spend()
    _refuse_length(sum(len(part) for part in parts if isinstance(part, str)))
    return _sized((markup_join if eval_ctx.autoescape else str_join)(parts))


def _bounded(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """A filter made a step, its width arguments and its result held to the limit."""
    skip = 2 if hasattr(func, "jinja_pass_arg") else 1  # the context and/or the value

    @functools.wraps(func)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _spend()
        value = args[skip - 1] if len(args) >= skip else None
        _refuse_filter(name, value, args[skip:], kwargs)
        return _sized(func(*args, **kwargs))

    return bounded


class _Steps(NodeTransformer):
    """Each loop's items counted, each ~ and block set's result held to the limit."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, "_counted", [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        parts = nodes.List(node.nodes, lineno=node.lineno)
        return nodes.Filter(parts, "_joined", [], [], None, None, lineno=node.lineno)

    def visit_AssignBlock(self, node: nodes.AssignBlock) -> nodes.Node:
        self.generic_visit(node)
        sized = nodes.Filter(None, "_sized", [], [], None, None, lineno=node.lineno)
        if node.filter is not None:  # {% set x | upper %}: the filter's own result is sized
            sized = node.filter
        node.filter = sized
        return node


class BoundedSandbox(SandboxedEnvironment):
    """Jinja2's sandbox with each render held to the Budget running (see the module)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals.pop("lipsum", None)  # its paragraphs are a size no check sees
        self.filters = {n: _bounded(n, f) for n, f in self.filters.items()}
        self.filters.update(_counted=_counted, _joined=_joined, _sized=_sized)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        return _Steps().visit(tree)  # type: ignore[no-any-return]

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        """The operator, refused before it runs if its result would be past the limits."""
        _spend()
        if operator == "*" and isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > POWER_BITS:
                raise OverBudget(f"a product of more than {POWER_BITS:,} bits")
        elif operator == "*":
            for sized, times in ((left, right), (right, left)):
                if isinstance(times, int) and isinstance(sized, str | bytes):
                    _refuse_length(len(sized) * times)
                elif isinstance(times, int) and isinstance(sized, list | tuple):
                    _refuse_items(len(sized) * times)
        elif operator == "+" and isinstance(left, str | bytes):
            _refuse_length(len(left) + (len(right) if isinstance(right, str | bytes) else 0))
        elif operator == "+" and isinstance(left, list | tuple):
            _refuse_items(len(left) + (len(right) if isinstance(right, list | tuple) else 0))
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if abs(left) > 1 and right > 0 and left.bit_length() * right > POWER_BITS:
                raise OverBudget(f"a power of more than {POWER_BITS:,} bits")
        elif operator == "%":
            values = right if isinstance(right, tuple) else (right,)
            _refuse_format(left, values, braces=False)
        return _sized(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """A call from the template, a step, held to the limits as a filter is."""
        _spend()
        _refuse_method(__obj, args, kwargs)
        return _sized(super().call(__context, __obj, *args, **kwargs))
