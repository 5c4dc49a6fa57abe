"""Where a page may send the browser on: only to a path on this site."""

from urllib.parse import urlsplit

# The longest address kept; a list URL with a long search is well under it.
LOCAL_CHARS = 2048


def local_path(value: str | None, default: str) -> str:
    """value if it is a path on this site, else default.

    No scheme, no host, no "//" or backslash that a browser would read as another host
    ("/\\\\evil.example" is //evil.example to a browser), no control character.
    """
    if not value or len(value) > LOCAL_CHARS or not value.startswith("/"):
        return default
    if value.startswith("//") or "\\" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value
