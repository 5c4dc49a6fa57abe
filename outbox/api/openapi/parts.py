"""The pieces every operation of the OpenAPI document uses: references, answers, closed objects."""

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

Schema = dict[str, Any]
COMPONENTS = "#/components/schemas/{model}"


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/{name}"}


def model_schema(
    model: type[BaseModel], mode: JsonSchemaMode = "validation"
) -> tuple[Schema, Schema]:
    """A model's JSON Schema, and the schemas it refers to (in components).

    A body a client sends shows no defaults (the descriptions say them): openapi-typescript
    makes a field with a default one the client must send.
    """
    schema = model.model_json_schema(ref_template=COMPONENTS, mode=mode)
    refs = schema.pop("$defs", {})
    for shown in (schema, *refs.values()) if mode == "validation" else ():
        for shape in shown.get("properties", {}).values():
            shape.pop("default", None)
    return schema, refs


def answer(description: str, schema: str, **headers: str) -> Schema:
    """A JSON response with a schema from components and headers from there too."""
    found: Schema = {
        "description": description,
        "content": {"application/json": {"schema": ref(f"schemas/{schema}")}},
    }
    if headers:
        found["headers"] = {name: ref(f"headers/{header}") for name, header in headers.items()}
    return found


def closed(properties: dict[str, Schema], *required: str) -> Schema:
    """An object of exactly these properties; all required unless some are named."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required or properties),
        "additionalProperties": False,
    }


UNAUTHORIZED = answer("No valid token.", "Error", **{"WWW-Authenticate": "WWW-Authenticate"})
UNAVAILABLE = answer(
    "The database cannot be reached; retry with the same Idempotency-Key.",
    "Error",
    **{"Retry-After": "Retry-After"},
)
FORBIDDEN = answer("The token lacks the scope this needs, named.", "Forbidden")
NOT_FOUND = answer("No such message.", "Error")
UNSUPPORTED = answer(
    "A body of a type not taken, or JSON sent without Content-Type: application/json.",
    "Unsupported",
    Accept="Accept",
)
MESSAGE_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}


def header_schemas() -> dict[str, Schema]:
    def header(description: str, **schema: Any) -> Schema:
        return {
            "description": description,
            "required": True,
            "schema": {"type": "string", **schema},
        }

    return {
        "Location": header("The message's URL."),
        "Idempotent-Replayed": {
            **header("A repeat of an earlier request.", const="true"),
            "required": False,
        },
        "WWW-Authenticate": header("How to authenticate.", const="Bearer"),
        "Retry-After": header("Seconds to wait.", pattern="^[0-9]+$"),
        "Accept": header("The content types taken, comma-separated."),
    }


def forbid(paths: dict[str, Schema]) -> None:
    """Give each operation the 403 of a token without its scope (in place).

    Every token holds some scopes, not all: any operation may be refused for one.
    """
    for operation in (op for item in paths.values() for op in item.values()):
        operation["responses"].setdefault("403", FORBIDDEN)


def open_objects(node: Any) -> None:
    """Say of each object schema with no properties named that it takes any (in place).

    openapi-typescript types a bare {"type": "object"} as an object that holds nothing.
    """
    if isinstance(node, list):
        for item in node:
            open_objects(item)
    if not isinstance(node, dict):
        return
    named = {"properties", "additionalProperties", "patternProperties", "$ref"}
    if node.get("type") == "object" and not named & set(node):
        node["additionalProperties"] = True
    for key, value in node.items():
        if key != "example":  # a value, not a schema
            open_objects(value)
