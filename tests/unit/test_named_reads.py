"""The pages and the API call named reads: no module of outbox/web or outbox/api makes a
statement of its own (the import contract in pyproject.toml keeps sqlalchemy out too)."""

import ast
from pathlib import Path

import pytest

OUTBOX = Path(__file__).parents[2] / "outbox"
VIEWS = sorted([*OUTBOX.glob("web/**/*.py"), *OUTBOX.glob("api/**/*.py")])
# What a view may still do with the request's session: end its transaction, or forget
# what it loaded so that the next read reads again. None of them makes a statement.
SESSION_CALLS = {"commit", "rollback", "expire_all"}
# Methods that run a statement on whatever holds them (a session, a connection, an engine).
EXECUTING = {"execute", "exec_driver_sql", "scalar", "scalars", "scalar_one", "get_one"}
DATABASE_PACKAGES = ("sqlalchemy", "flask_sqlalchemy")


def _dotted(node: ast.expr) -> str:
    """An attribute chain as written (db.session.get), "" where it is not names alone."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (head := _dotted(node.value)):
        return f"{head}.{node.attr}"
    return ""


def statements(source: str) -> list[tuple[int, str]]:
    """Where a module reads or writes the database itself, by line: what it does there."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                if (name or "").split(".")[0] in DATABASE_PACKAGES:
                    found.append((node.lineno, f"imports {name}"))
        if not isinstance(node, ast.Attribute):
            continue
        chain = _dotted(node)
        if node.attr == "query":
            found.append((node.lineno, f"{chain or '...'}.query"))  # Model.query, session.query
        elif chain.startswith("db.") and chain.count(".") == 1 and node.attr != "session":
            found.append((node.lineno, chain))  # db.engine, db.select, db.paginate
        elif chain.startswith("db.session.") and chain.count(".") == 2:
            if node.attr not in SESSION_CALLS:
                found.append((node.lineno, chain))
        elif node.attr in EXECUTING:
            found.append((node.lineno, f"{chain or '...'}()"))
    return sorted(found)


@pytest.mark.parametrize(
    "source",
    [
        "db.session.execute(select(User))",
        "db.session.scalars(stmt)",
        "db.session.get(Message, 1)",
        "db.session.refresh(message)",
        "db.session.add(row)",
        "rows = User.query.all()",
        "db.engine.connect()",
        "connection.execute(stmt)",
        "from sqlalchemy import select",
        "import sqlalchemy.orm",
        "from flask_sqlalchemy.pagination import Pagination",
    ],
)
def test_a_statement_in_a_view_is_found(source: str) -> None:
    assert statements(source)


@pytest.mark.parametrize(
    "source",
    [
        "db.session.commit()",
        "db.session.rollback()",
        "db.session.expire_all()",
        "request.args.get('before')",
        "request.query_string",
        "from outbox.models.db import db",
    ],
)
def test_what_a_view_may_do_is_not_taken_for_a_statement(source: str) -> None:
    assert statements(source) == []


def test_no_view_or_api_handler_makes_a_statement() -> None:
    assert len(VIEWS) > 20  # both packages, their modules found
    found = [f"{path.relative_to(OUTBOX.parent)}:{line}: {what}"
             for path in VIEWS for line, what in statements(path.read_text())]  # fmt: skip
    assert found == [], "call a named read (ops, auth, capabilities) instead:\n" + "\n".join(found)
