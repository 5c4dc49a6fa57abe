"""A mailing's subject as each recipient's row stores it (templates.Subject), held to the
sandbox's own render as its oracle."""

import pytest

from outbox.capabilities.mailings.templates import Subject, compile_templates
from outbox.core.schema import LINE_CHARS

LONGEST = 25 * 1024 * 1024
VALUES = [
    {"first": "Ann", "n": 3},
    {"first": "Zoë ☃", "n": -1.5},
    {"first": True, "n": None},
    {"first": ["a", 1], "n": {"k": "v"}},
    {"first": "", "n": 10**40},
    {"first": "{{ n }}", "n": "<b>&</b>"},
]
TEMPLATES = [
    "News for {{ first }}",
    "{{ first }}{{ n }}",
    "{{first}} and {{ n }}!",
    "{{ first | upper }} {{ n }}",
    "{% if n %}{{ n }} for {% endif %}{{ first }}",
    "{# a note #}Hi {{ first }}",
    "Hi {{ first }} <{{ email }}> {{ name }}",
]


def sandboxed(source: str, values: dict[str, object]) -> str:
    return compile_templates({"subject": source}).render(values, LONGEST)["subject"] or ""


@pytest.mark.parametrize("source", TEMPLATES)
def test_each_recipients_subject_is_the_one_the_sandbox_renders(source):
    subject = Subject(source, LONGEST)
    for values in VALUES:
        full = {**values, "email": "ann@example.com", "name": "Ann"}
        assert subject.of(full) == sandboxed(source, full)


def test_text_and_plain_outputs_are_joined_without_the_sandbox():
    assert Subject("News for {{ first }}", LONGEST).parts == [(False, "News for "), (True, "first")]
    assert Subject("{{ first | upper }}", LONGEST).parts is None  # rendered in the sandbox


def test_a_subject_without_template_syntax_is_stored_as_written():
    subject = Subject("November news {not a template}", LONGEST)
    assert subject.fixed and subject.of({}) == "November news {not a template}"
    assert Subject(None, LONGEST).of({"first": "Ann"}) == ""


def test_a_subject_using_the_unsubscribe_token_or_failing_is_stored_as_its_template():
    token = "Bye {{ unsubscribe_token }}"
    assert Subject(token, LONGEST).of({"first": "Ann"}) == token
    failing = "{{ 10 // n }} left"
    assert Subject(failing, LONGEST).of({"n": 0}) == failing
    assert Subject(failing, LONGEST).of({"n": 5}) == "2 left"


def test_a_long_rendered_subject_is_cut_to_a_subjects_width():
    found = Subject("{{ first }}{{ first }}", LONGEST).of({"first": "x" * 900})
    assert found == "x" * LINE_CHARS
