"""The docs site builds strictly, its references are made from the code, the README stays short."""

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from outbox import config
from outbox.api import openapi

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as `make docs` builds it: strict, so a broken link or anchor fails it."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
    done = subprocess.run([*command, "-d", str(out)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def text_of(site: Path, page: str) -> str:
    """A built page's words, without its markup."""
    words = re.sub(r"<[^>]+>", "", (site / f"{page}.html").read_text())
    return " ".join(html.unescape(words).split())


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 150
    commands = [line.split("#")[0].strip() for line in lines if line.startswith("make ")]
    assert commands[:2] == ["make run", "make test"]
    first_block = lines.index("```sh")
    assert lines[first_block + 1].startswith("make run") and first_block < 10


def test_the_settings_reference_names_every_setting(site):
    words = text_of(site, "reference/settings")
    for name, description in config.DESCRIPTIONS.items():
        assert f"OUTBOX_{name}" in words
        assert " ".join(description.replace("`", "").split()).lower() in words.lower()


def test_the_api_reference_has_every_operation_and_schema(site):
    words = text_of(site, "reference/api")
    document = openapi.document()
    for path, operations in document["paths"].items():
        for method in operations:
            assert f"{method.upper()} {path}" in words
    for name in document["components"]["schemas"]:
        assert f'id="schema-{name.lower()}"' in (site / "reference/api.html").read_text()


def test_the_commands_reference_has_every_command(site):
    words = text_of(site, "reference/commands")
    for name in ("worker", "send-queued", "pause", "smtpd", "dkim add", "webhook deliver"):
        assert f"outbox {name}" in words


def test_no_reference_page_is_written_by_hand():
    """Only the commands page is a file, and it holds mkdocs-click's directive, no table."""
    written = sorted(p.name for p in (ROOT / "docs" / "reference").iterdir())
    assert written == ["commands.md"]
    page = (ROOT / "docs" / "reference" / "commands.md").read_text()
    assert "::: mkdocs-click" in page and "|---" not in page


def test_the_site_loads_nothing_from_the_network(site):
    """No font, script or style from a CDN: the site works where there is no internet."""
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', text), page
