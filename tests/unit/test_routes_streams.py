"""Routes per stream: a route that lists streams carries only those; the file is refused
when a stream has no route; without streams listed, every message is routed as before."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from outbox.capabilities.routes.config import RoutesError, load
from outbox.config import DEFAULTS

CONFIG = {**DEFAULTS, "SMTP_TIMEOUT": 7.0, "MAIL_MAX_CONNECTIONS": 2}
FILE = """
[[routes]]
name = "relay"
host = "smtp.example.com"
{relay}

[[routes]]
name = "bulk"
host = "bulk.example.com"
streams = ["broadcast"]

[[rules]]
sender_domain = "shop.example"
route = "relay"
fallback = ["bulk"]
"""


def table(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "routes.toml"
    path.write_text(text, encoding="utf-8")
    return load(path, CONFIG, {})


def mail(stream: str | None, sender: str = "news@example.com") -> SimpleNamespace:
    fields = {"from_addr": sender, "priority": 0, "recipients": []}
    return SimpleNamespace(**fields, **({"stream": stream} if stream else {}))


def chosen(found, mail: SimpleNamespace) -> list[str]:  # type: ignore[no-untyped-def]
    return [route.name for route in found.choose(mail)]


def test_a_route_listing_streams_carries_only_those(tmp_path):
    found = table(tmp_path, FILE.format(relay='streams = ["transactional"]'))
    assert found.routes["bulk"].streams == ("broadcast",)
    assert chosen(found, mail("transactional")) == ["relay"]
    assert chosen(found, mail("broadcast")) == ["bulk"]  # the first route that carries it
    assert chosen(found, mail(None)) == ["relay"]  # a row without the column: transactional
    # A rule's chain keeps the routes that carry the stream, in order.
    assert chosen(found, mail("broadcast", "a@shop.example")) == ["bulk"]
    assert chosen(found, mail("transactional", "a@shop.example")) == ["relay"]


def test_without_streams_a_route_carries_every_stream_as_before(tmp_path):
    found = table(tmp_path, FILE.format(relay=""))
    assert found.routes["relay"].streams is None
    assert chosen(found, mail("broadcast")) == ["relay"]
    assert chosen(found, mail("broadcast", "a@shop.example")) == ["relay", "bulk"]
    assert chosen(found, mail("transactional", "a@shop.example")) == ["relay"]


@pytest.mark.parametrize(
    "relay, problem",
    [
        ('streams = ["transactional", "bulk"]', "streams: 'bulk' is not a stream"),
        ("streams = []", "streams must be a list of stream names"),
        ('streams = "broadcast"', "streams must be a list of stream names"),
        ('streams = ["broadcast"]', "no route carries transactional mail"),
    ],
)
def test_bad_streams_are_refused_by_name(tmp_path, relay, problem):
    with pytest.raises(RoutesError, match=problem):
        table(tmp_path, FILE.format(relay=relay))
