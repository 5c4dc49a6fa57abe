"""The docs' pages about the code made from the code: the layers diagram from the
import-linter contract in pyproject.toml, and the code map from each module's docstring."""

import ast
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).parents[2]
GENERATED = "<!-- Generated from {source} by docs/hooks/layers.py; do not edit. -->\n\n"
# The modules above the layers: they put the app together from all of them.
TOP = ["outbox.__main__", "outbox.app", "outbox.config", "outbox.demo", "outbox.extensions"]
MARK = "<!-- layers diagram -->"
WIDTH = 70


def contract() -> list[list[str]]:
    """The layers of the contract, highest first, each a list of its packages."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        tool = tomllib.load(f)["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in tool["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in layers]


def summary(path: Path) -> str:
    """The first sentence-line of a module's docstring (of __init__.py for a package)."""
    if path.is_dir():
        path = path / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def members(package: str) -> list[str]:
    """The modules and subpackages directly in a package, by name."""
    folder = ROOT / package.replace(".", "/")
    found = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
    found += [p.name for p in folder.iterdir() if (p / "__init__.py").exists()]
    return sorted(found)


def diagram() -> str:
    """The layers as boxes, highest first, each naming what it holds."""
    lines = ["```text"]
    for i, layer in enumerate(contract()):
        if i:
            lines += [" " * (WIDTH // 2) + "|", " " * (WIDTH // 2) + "v"]
        cell = (WIDTH - 1) // len(layer) - 1
        rule = "+" + "+".join("-" * cell for _ in layer) + "+"
        rows = [[f" {name.removeprefix('outbox.')}/"] for name in layer]
        for column, name in zip(rows, layer, strict=True):
            text = ""
            for member in members(name):
                if len(text) + len(member) + 1 > cell - 2:
                    column.append(text)
                    text = ""
                text += " " + member
            column.append(text)
        depth = max(len(c) for c in rows)
        lines.append(rule)
        for r in range(depth):
            lines.append("|" + "|".join(
                (c[r] if r < len(c) else "").ljust(cell) for c in rows) + "|")  # fmt: skip
        lines.append(rule)
    lines.append("```")
    return "\n".join(lines)


def code_map() -> str:
    """Every package and module of outbox, by layer, with the sentence that opens it."""
    lines = [GENERATED.format(source="each module's docstring"), "# Code map", ""]
    lines += [
        "Every module of `outbox/`, layer by layer from the top (see [Layers](layers.md)), "
        "with the sentence that opens it.",
        "",
        "## Composition root",
        "",
        "| module | owns |",
        "|---|---|",
    ]
    for name in TOP:
        path = ROOT / (name.replace(".", "/") + ".py")
        lines.append(f"| `{name}` | {cell(summary(path))} |")
    for layer in contract():
        for package in layer:
            opening = cell(summary(ROOT / package.replace(".", "/")))
            lines += ["", f"## {package.removeprefix('outbox.')}", "", opening, ""]
            lines += ["| module | owns |", "|---|---|"]
            lines += list(rows(package))
    lines += ["", "## client", "", "| module | owns |", "|---|---|", *rows("outbox.client")]
    return "\n".join(lines) + "\n"


def rows(package: str) -> Any:
    """A table row for each module under a package, subpackages' modules included."""
    folder = ROOT / package.replace(".", "/")
    for member in members(package):
        path = folder / member if (folder / member).is_dir() else folder / f"{member}.py"
        yield f"| `{package}.{member}` | {cell(summary(path))} |"
        if path.is_dir():
            yield from rows(f"{package}.{member}")


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def on_files(files: Files, config: Any) -> Files:
    """Add the code map beside the written pages."""
    files.append(File.generated(config, "internals/code-map.md", content=code_map()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Put the diagram drawn from the contract where the layers page marks it."""
    if MARK in markdown:
        return markdown.replace(MARK, diagram())
    return markdown
