"""How the pages show a message: the way back to the list, how much of its HTML body and
what it left out, and the inline images it shows (cid:)."""

import re
from base64 import b64encode
from collections.abc import Callable
from html import unescape
from urllib.parse import unquote

from flask import url_for

from outbox.core.checks import Upload
from outbox.web.links import local_path

# The most of an HTML body the page shows; the page says when it shows less.
SHOWN_HTML_CHARS = 1024 * 1024

# The HTML body is read by one scan of the tokens that matter: comments, the text of
# <style> and the other raw-text elements (where "<" starts no tag), and start tags with
# their attributes as the HTML standard splits them (a quoted value up to its quote, an
# unquoted one up to a space or ">"). Every pattern matches whatever follows its first
# characters, up to the end of the body if it must, and takes no step back (possessive
# quantifiers): each character is read a fixed number of times, so the work grows with
# the body's length and no crafted body makes it grow faster. Python's html.parser
# does not (its scan restarts at every unfinished tag) and a DOM library would write
# the body out again in its own spelling, where the page serves it as stored.

# Elements whose text holds no tags; <noscript> is not one of them in the sandboxed frame,
# which runs no script.
RAW_TEXT = "style|script|textarea|title|xmp|iframe|noembed|noframes"
VALUE = r"""(?:"[^"]*+"?|'[^']*+'?|[^\s>]*+)"""
ATTRIBUTE = rf"""(?:[^\s/>][^\s/>=]*+)(?:\s*+=\s*+{VALUE})?"""
TOKEN = re.compile(
    rf"""<!--(?:[^-]++|-(?!->))*+(?:-->)?"""
    rf"""|<(?P<raw>{RAW_TEXT})(?![^\s/>])(?P<raw_attrs>(?:[\s/]++|{ATTRIBUTE})*+)(?P<raw_close>>?)"""
    rf"""(?P<text>(?:[^<]++|<(?!/(?P=raw)(?![^\s/>])))*+)"""
    rf"""|<(?P<tag>[A-Za-z][^\s/>]*+)(?P<attrs>(?:[\s/]++|{ATTRIBUTE})*+)(?P<close>>?)""",
    re.IGNORECASE,
)
ATTRIBUTES = re.compile(rf"""(?P<name>[^\s/>][^\s/>=]*+)(?P<rest>\s*+=\s*+(?P<value>{VALUE}))?""")
# The attributes that load what their value names: an image, a srcset's candidates,
# a table's background, a video's poster.
LOADING = frozenset({"src", "srcset", "background", "poster"})
# A CSS url() whose address is absolute (http:, https: or scheme-relative //), up to
# its ")" or, without one, to the end of the style.
REMOTE_URL = re.compile(r"""url\(\s*+["']?\s*+(?:https?:)?//[^)]*+\)?""", re.IGNORECASE)
# Where a URL in a value starts: at its beginning, or after a space or a srcset's comma.
URL_SPLIT = re.compile(r"[\s,]++")


def back_to(value: str | None) -> str:
    """The local page a message was opened from, or the outbox list if value is not one."""
    return local_path(value, url_for("messages.index"))


def shown_part(html: str | None) -> str:
    """The part of an HTML body the page shows: all of it up to SHOWN_HTML_CHARS."""
    return (html or "")[:SHOWN_HTML_CHARS]


def loads_remote(html: str | None) -> bool:
    """Whether an HTML body asks for images (or other content) from other sites."""
    if not html:
        return False
    found = False

    def note(_: str) -> None:
        nonlocal found
        found = True

    _rewrite(html, note)
    return found


def without_remote(html: str) -> str:
    """The HTML body for the page's iframe, its remote loads renamed away.

    The iframe's policy blocks them whatever this misses (an address in CSS escapes,
    say): this only spares the browser's console an error for each, and the page says
    what was left out (loads_remote).
    """
    return _rewrite(html, lambda _: None)


def _rewrite(html: str, found: Callable[[str], None]) -> str:
    """The body with each remote load renamed away, calling found with each one's text."""

    def token(match: re.Match[str]) -> str:
        if match["tag"] is not None:
            return f"<{match['tag']}{_attributes(match['attrs'], found)}{match['close']}"
        if match["raw"] is not None:
            text = match["text"]
            if match["raw"].lower() == "style":
                text = _css(text, found)
            attributes = _attributes(match["raw_attrs"], found)
            return f"<{match['raw']}{attributes}{match['raw_close']}{text}"
        return match[0]  # a comment

    return TOKEN.sub(token, html)


def _attributes(text: str, found: Callable[[str], None]) -> str:
    """A start tag's attributes, those loading from other sites renamed data-blocked-*."""
    if "/" not in text and "&" not in text and "url" not in text.lower():
        return text  # no address, no character reference, no CSS url(): nothing to change

    def attribute(match: re.Match[str]) -> str:
        name, value = match["name"].lower(), match["value"]
        if value is None:
            return match[0]
        if name == "style":
            before = match[0][: match.start("value") - match.start()]
            return before + _css_value(value, found)
        if name in LOADING and _remote(name, value):
            found(match[0])
            return f"data-blocked-{match[0]}"
        return match[0]

    return ATTRIBUTES.sub(attribute, text)


def _remote(name: str, value: str) -> bool:
    """Whether an attribute's value (quoted or not) names an address on another site."""
    value = unescape(value.strip("\"'")).strip()
    if name != "srcset" and value[:5].lower() == "data:":
        return False  # one URL, its data may hold "//"
    for url in URL_SPLIT.split(value):
        lowered = url.lower()
        if lowered.startswith(("//", "http://", "https://")):
            return True
    return False


def _css_value(value: str, found: Callable[[str], None]) -> str:
    """A style attribute's value, quoted or not, with _css applied inside its quotes."""
    quoted = len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]
    if not quoted:
        return _css(value, found)
    return value[0] + _css(value[1:-1], found) + value[0]


def _css(text: str, found: Callable[[str], None]) -> str:
    """CSS with each url() of another site's address made an empty data: URL."""

    def blocked(match: re.Match[str]) -> str:
        found(match[0])
        return "url(data:,)"

    return REMOTE_URL.sub(blocked, text)


# cid: URLs (RFC 2392) where an attribute's value or a CSS url() starts: the Content-ID,
# URL-encoded, up to a quote, a space, ">" or ")". Text that only names one stays.
CID_URL = re.compile(r"""([=(]\s*["']?)cid:([^"'\s>)]+)""", re.IGNORECASE)
# Image types a browser shows and runs nothing from (no SVG: it can hold script).
SHOWN_IMAGES = ("image/png", "image/jpeg", "image/gif", "image/webp")
INLINE_SHOWN_BYTES = 5 * 1024 * 1024  # inline images put into a page, together at most


def inline_images(files: list[Upload]) -> dict[str, str]:
    """The inline parts the page may show in the HTML body, each as a data: URL by its
    Content-ID (lower case): raster images only, the first up to INLINE_SHOWN_BYTES."""
    found, total = {}, 0
    for upload in files:
        kind = upload.content_type.split(";")[0].strip().lower()
        if upload.content_id is None or kind not in SHOWN_IMAGES:
            continue
        total += len(upload.data)
        if total > INLINE_SHOWN_BYTES:
            break
        found[upload.content_id.lower()] = f"data:{kind};base64,{b64encode(upload.data).decode()}"
    return found


def with_inline(html: str, images: dict[str, str]) -> str:
    """The HTML body with each cid: URL of an image in images made that image's data: URL
    (the iframe's policy takes data: images only); others are left as they are."""
    if not images:
        return html

    def shown(match: re.Match[str]) -> str:
        image = images.get(unquote(match[2]).lower())
        return match[0] if image is None else match[1] + image

    return CID_URL.sub(shown, html)
