"""How the pages show a message: the way back to the list, what its HTML body left out,
and the inline images it shows (cid:)."""

import re
from base64 import b64encode
from urllib.parse import unquote, urlsplit

from flask import url_for

from ..checks import Upload

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
