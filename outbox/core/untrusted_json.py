"""JSON from outside read whole: decoded, and held to a depth every reader of it can handle.

A value nested a few thousand deep decodes fine or raises RecursionError (not the
ValueError a bad body raises) in Python's decoder, and then breaks whatever walks it
next (json.dumps, pydantic, a template) with a RecursionError: a 500. No request outbox
takes nests more than a few levels; past MAX_DEPTH it is refused, by name.
"""

import json
from typing import Any

MAX_DEPTH = 64  # objects and lists inside one another, the outermost counted
TOO_DEEP = f"is nested more than {MAX_DEPTH} objects or lists deep"


def depth_of(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep value's objects and lists go, counted without recursion; stops past limit."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def loads(data: bytes | str) -> Any:
    """data decoded; ValueError saying why if it is not JSON or nests past MAX_DEPTH."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both
        raise ValueError(f"is not valid JSON: {exc}") from None
    if depth_of(value) > MAX_DEPTH:
        raise ValueError(TOO_DEEP)
    return value
