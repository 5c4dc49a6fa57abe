"""The `outbox check` command as the tests read it, and the migration revisions it names."""

from alembic.script import ScriptDirectory

from outbox.app import MIGRATIONS
from outbox.ops import probes


def revisions(app) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """The scripts' head and the revision before it, as the checks name them."""
    with app.app_context():
        head = probes.schema_head()
    scripts = ScriptDirectory(MIGRATIONS)
    return head, scripts.get_revision(head).down_revision


def check(runner):  # type: ignore[no-untyped-def]
    result = runner.invoke(args=["check"])
    return result.exit_code, result.output


def line(output: str, name: str) -> str:
    """The result line of one check, and its hint line if it has one."""
    lines = output.splitlines()
    for n, text in enumerate(lines):
        if text[6:].startswith(name + " "):
            hint = lines[n + 1] if n + 1 < len(lines) and "fix:" in lines[n + 1] else ""
            return f"{text}\n{hint}".strip()
    raise AssertionError(f"no {name} line in:\n{output}")
