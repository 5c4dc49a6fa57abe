"""The deploy/ files as the tests read them: systemd units and their settings."""

from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def unit(name: str) -> dict[str, dict[str, str]]:
    """A unit file's sections and settings (a setting given twice: the last)."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in (DEPLOY / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
        else:
            key, _, value = line.partition("=")
            current[key] = value
    return sections
