"""The docs' reference pages made from the code at each build: the HTTP API and the settings."""

import json
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from outbox import config as settings
from outbox.api import openapi

Schema = dict[str, Any]
GENERATED = "<!-- Generated from {source} by docs/hooks/reference.py; do not edit. -->\n\n"


def on_config(config: Any) -> None:
    """Let mkdocs-click import the commands' group by its module name (reference/commands.md)."""
    folder = str(Path(__file__).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages beside the written ones."""
    made = {"reference/api.md": api_page(), "reference/settings.md": settings_page()}
    for path, text in made.items():
        files.append(File.generated(config, path, content=text))
    return files


def api_page() -> str:
    """The HTTP API reference, from the OpenAPI document /api/openapi.json serves."""
    document = openapi.document()
    info = document["info"]
    lines = [GENERATED.format(source="outbox.api.openapi.document()"), "# HTTP API reference", ""]
    lines += [
        f"{info['description']} OpenAPI {document['openapi']}, version {info['version']}: "
        "the same document `GET /api/openapi.json` answers. Every request carries "
        "`Authorization: Bearer TOKEN`, a token from `outbox create-token` "
        "([the guide](../integrating/api.md) tells how to use the API).",
        "",
    ]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            lines += operation_lines(method.upper(), path, operation)
    lines += ["## Schemas", ""]
    for name, schema in document["components"]["schemas"].items():
        lines += schema_lines(name, schema)
    lines += ["## Headers", "", "| header | required | type | description |", "|---|---|---|---|"]
    for name, header in document["components"]["headers"].items():
        lines.append(f"| `{name}` | {yes(header.get('required'))} | {type_of(header['schema'])} "
                     f"| {cell(header.get('description', ''))} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def operation_lines(method: str, path: str, operation: Schema) -> list[str]:
    """One operation: what it does, its parameters, its body and its answers."""
    lines = [f"## `{method} {path}`", "", operation.get("summary", "") + ".", ""]
    if operation.get("description"):
        lines += [operation["description"], ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
        for parameter in parameters:
            lines.append(
                f"| `{parameter['name']}` | {parameter['in']} | {yes(parameter.get('required'))} "
                f"| {type_of(parameter.get('schema', {}))} "
                f"| {cell(parameter.get('description', ''))} |"
            )
        lines.append("")
    body = operation.get("requestBody")
    if body:
        lines += ["Request body:", ""]
        for media, content in body["content"].items():
            lines.append(f"- `{media}`: {type_of(content.get('schema', {}))}")
        lines.append("")
        lines += example_lines(next(iter(body["content"].values())), "Example request")
    lines += ["| status | description | body |", "|---|---|---|"]
    for status, answer in operation["responses"].items():
        content = next(iter(answer.get("content", {}).values()), {})
        shape = type_of(content["schema"]) if "schema" in content else ""
        lines.append(f"| {status} | {cell(answer.get('description', ''))} | {shape} |")
    lines.append("")
    success = next((a for s, a in operation["responses"].items() if s.startswith("2")), {})
    lines += example_lines(next(iter(success.get("content", {}).values()), {}), "Example answer")
    return lines


def example_lines(content: Schema, title: str) -> list[str]:
    """A body's example as a JSON block, when the document has one."""
    if "example" not in content or path_is_document(content["example"]):
        return []
    text = json.dumps(content["example"], indent=2, ensure_ascii=False)
    return [f"{title}:", "", "```json", text, "```", ""]


def path_is_document(example: Any) -> bool:
    """The document's own example is the document: too long to show again."""
    return isinstance(example, dict) and "openapi" in example


def schema_lines(name: str, schema: Schema) -> list[str]:
    """One named schema: its description and, for an object, its properties."""
    lines = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if schema.get("description"):
        lines += [schema["description"], ""]
    properties = schema.get("properties")
    if not properties:
        return [*lines, f"Type: {type_of(schema)}.", ""]
    required = set(schema.get("required", []))
    lines += ["| field | required | type | description |", "|---|---|---|---|"]
    for field, shape in properties.items():
        lines.append(f"| `{field}` | {yes(field in required)} | {type_of(shape)} "
                     f"| {cell(shape.get('description', ''))} |")  # fmt: skip
    return [*lines, ""]


def type_of(schema: Schema) -> str:
    """A JSON schema in a few words, named schemas linked."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#schema-{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(type_of(choice) for choice in schema[key])
    if "allOf" in schema:
        return " and ".join(type_of(part) for part in schema["allOf"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    kinds = schema.get("type", "any")
    if isinstance(kinds, list):
        return " or ".join(type_of({**schema, "type": kind}) for kind in kinds)
    if kinds == "array":
        return f"list of {type_of(schema.get('items', {}))}"
    if kinds == "object" and isinstance(schema.get("additionalProperties"), dict):
        names = schema.get("propertyNames", {}).get("pattern")
        most = schema.get("maxProperties")
        keys = (f" of at most {most} keys" if most else "") + (f" `{names}`" if names else "")
        return f"object{keys} to {type_of(schema['additionalProperties'])}"
    return kinds + (f" ({schema['format']})" if "format" in schema else "") + limits(schema)


def limits(schema: Schema) -> str:
    """A schema's bounds, as a table cell shows them."""
    found = [f"{word} {schema[key]}" for key, word in BOUNDS if key in schema]
    return f", {', '.join(found)}" if found else ""


BOUNDS = (("minimum", "at least"), ("maximum", "at most"), ("minLength", "length at least"),
          ("maxLength", "length at most"), ("minItems", "items at least"),
          ("maxItems", "items at most"))  # fmt: skip


def settings_page() -> str:
    """The settings reference, from outbox.config's defaults, types and descriptions."""
    lines = [GENERATED.format(source="outbox/config.py"), "# Settings reference", ""]
    lines += [
        "Each setting is `OUTBOX_<NAME>` in the environment or `<NAME>` in the instance "
        "folder's `config.py`; [Getting started](../getting-started.md#configuration) says "
        "which wins. `instance/` below means the instance folder.",
        "",
    ]
    for name, default in settings.DEFAULTS.items():
        description = settings.DESCRIPTIONS[name]
        lines += [
            f"## `OUTBOX_{name}`",
            "",
            f"{settings.type_name(name).capitalize()}; default {shown_default(name, default)}.",
            "",
            description[0].upper() + description[1:] + ".",
            "",
        ]
    return "\n".join(lines) + "\n"


def shown_default(name: str, default: Any) -> str:
    """A default as a reader writes it: none, true, a number with its unit."""
    if default is None or default == "" or default == frozenset():
        return "none"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    if name.endswith("_BYTES"):
        return f"`{default}` ({default // 1024 // 1024} MiB)"
    return f"`{default}`"


def yes(flag: Any) -> str:
    """A table's required column."""
    return "yes" if flag else ""


def cell(text: str) -> str:
    """Text made safe for one table cell."""
    return " ".join(text.split()).replace("|", "\\|")
