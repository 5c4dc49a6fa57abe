"""Answers a browser saves as a file: the Content-Disposition every download carries."""

import unicodedata
from urllib.parse import quote

from flask import Response

# RFC 5987's attr-char: what filename*= may carry unencoded.
ATTR_CHARS = "!#$&+-.^_`|~"


def as_download(response: Response, name: str) -> Response:
    """The response marked as a download saved under name, whatever its characters.

    A header is Latin-1: a name outside it goes as filename*=UTF-8''... (RFC 6266, as
    Werkzeug's send_file writes it), beside an ASCII filename= for clients without it.
    Control characters (a CR or LF would end the header) are dropped.
    """
    name = "".join(c for c in name if unicodedata.category(c) != "Cc") or "download"
    try:
        name.encode("ascii")
    except UnicodeEncodeError:
        simple = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
        names = {"filename": _fallback(simple), "filename*": f"UTF-8''{quote(name, ATTR_CHARS)}"}
    else:
        names = {"filename": name}
    response.headers.set("Content-Disposition", "attachment", **names)
    return response


def _fallback(simple: str) -> str:
    """The ASCII name: what was left of the name, or "download" with its extension."""
    stem, dot, extension = simple.rpartition(".")
    if stem.strip(" ._-"):
        return simple.strip()
    return f"download{dot}{extension}" if dot else "download"
