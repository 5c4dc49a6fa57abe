"""How the pages show a message: the way back to the list, and what its HTML body left out."""

import re
from urllib.parse import urlsplit

from flask import url_for

# The longest "back" address kept; a list URL with a long search is well under it.
BACK_CHARS = 2048
# A remote load in HTML: an image, srcset or background attribute, or a CSS url(), whose
# address is absolute (http:, https: or scheme-relative //) where a URL starts (a data:
# URL's base64 may hold "//"). One pass of a regular expression, no HTML parser.
REMOTE_ATTRIBUTE = re.compile(
    r"""\b(src|srcset|background|poster)(\s*=\s*["']?(?:[^"'>]*?[\s,])?(?:https?:)?//)""",
    re.IGNORECASE,
)
REMOTE_URL = re.compile(r"""url\(\s*(["']?)\s*(?:https?:)?//[^)]*?\1\s*\)""", re.IGNORECASE)


def back_to(value: str | None) -> str:
    """The local page a message was opened from, or the outbox list if value is not one.

    Only a path on this site is taken (no scheme, no host, no "//" or backslash that a
    browser would read as another host), so the link cannot lead elsewhere.
    """
    default = url_for("messages.index")
    if not value or len(value) > BACK_CHARS or not value.startswith("/"):
        return default
    if value.startswith("//") or "\\" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value


def loads_remote(html: str | None) -> bool:
    """Whether an HTML body asks for images (or other content) from other sites."""
    if not html:
        return False
    return bool(REMOTE_ATTRIBUTE.search(html) or REMOTE_URL.search(html))


def without_remote(html: str) -> str:
    """The HTML body for the page's iframe, its remote loads renamed away.

    The iframe's policy blocks them whatever this misses (an address in entities, say):
    this only spares the browser's console an error for each, and the page says what
    was left out (loads_remote).
    """
    html = REMOTE_ATTRIBUTE.sub(r"data-blocked-\1\2", html)
    return REMOTE_URL.sub("url(data:,)", html)
