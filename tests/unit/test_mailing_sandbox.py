"""The mailing templates' sandbox: loops, long values and long output stopped, named, at once."""

import resource
import time

import pytest

from outbox.capabilities.mailings.templates import TemplateProblem, compile_templates

LIMIT = 25 * 1024 * 1024
# Each would run for hours or take gigabytes in Jinja2's own sandbox.
BOMBS = {
    "nested loops": "{% for a in range(100000) %}{% for b in range(100000) %}"
    "{% endfor %}{% endfor %}",
    "a long product": "{{ 'x' * 120000000 }}",
    "a list product": "{{ ([0] * 100000000)|length }}",
    "a power": "{{ 10 ** 100000000 }}",
    "a padded str": "{{ 'x'.ljust(999999999) }}",
    "a padded format": "{{ '{:>999999999}'.format(1) }}",
    "a format_map": "{{ '{:>{w}}'.format_map({'w': 999999999}) }}",
    "a %-format": "{{ '%*d' % (999999999, 1) }}",
    "a centred filter": "{{ 'x'|center(999999999) }}",
    "a replace": "{{ ('x' * 1000000).replace('', 'y' * 40) }}",
    "a join": "{{ (['x' * 1000000] * 100)|join }}",
    "a split": "{{ ('a ' * 10000000).split()|length }}",
    "a doubling ~": "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(40) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "a doubling block set": "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(40) %}"
    "{% set t %}{{ ns.s }}{{ ns.s }}{% endset %}{% set ns.s = t %}{% endfor %}",
    "a squaring": "{% set ns = namespace(n=3) %}{% for i in range(40) %}"
    "{% set ns.n = ns.n * ns.n %}{% endfor %}",
    "long output": "{% for i in range(100000) %}{{ 'x' * 20000 }}{% endfor %}",
    "slow calls": "{% set big = 'x' * 20000000 %}{% for i in range(90000) %}"
    "{{ big.count('y') }}{% endfor %}",
    "a slow filter": "{{ ('ab cd ' * 3000000)|urlize }}",
    "recursion": "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
}


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("source", BOMBS.values(), ids=BOMBS.keys())
def test_a_template_past_its_budget_fails_naming_the_limit_within_seconds(source):
    started, peak = time.monotonic(), _peak_mib()
    compiled = compile_templates({"text": source})
    with pytest.raises(TemplateProblem) as found:
        compiled.render({}, LIMIT)
    assert found.value.field == "text"
    said = found.value.error
    named = ("steps", "seconds", "limit", "past", "bits", "at most", "recursion")
    assert any(word in said for word in named), said
    assert time.monotonic() - started < 10  # the time budget is 2 s; a busy machine is slower
    assert _peak_mib() - peak < 200  # no value much past the 25 MiB limit was made


def test_the_output_is_held_to_the_limit_given():
    compiled = compile_templates({"text": "{{ 'x' * 600 }}", "html": "{{ 'y' * 600 }}"})
    with pytest.raises(TemplateProblem, match="size limit, 1,000 bytes") as found:
        compiled.render({}, 1_000)
    assert found.value.field == "html"  # the two bodies count together


def test_templates_within_the_budget_render_as_jinja_renders_them():
    source = ("{{ name ~ '!' }} {% for i in items %}{{ loop.index }}/{{ loop.length }}"
              "{% endfor %} {{ '%5d' % 3 }}|{{ '{:>4}'.format(2) }} {{ items|join(',') }} "
              "{% set block %}b{% endset %}{{ block|upper }} {{ 30000000 }} "
              "{{ '-' * 3 }} {{ 2 ** 10 }} {{ 'a b'.split()|list }}")  # fmt: skip
    values = {"name": "<Ann>", "items": [1, 2, 3]}
    texts = compile_templates({"text": source, "html": "<p>{{ name ~ '&' }}</p>"}).render(
        values, LIMIT
    )
    assert texts["text"] == ("<Ann>! 1/32/33/3     3|   2 1,2,3 B 30000000 --- 1024 "
                             "['a', 'b']")  # fmt: skip
    assert texts["html"] == "<p>&lt;Ann&gt;&amp;</p>"
