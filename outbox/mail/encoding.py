"""Text as it may go on the wire: folded headers, RFC 2047 words, RFC 2231 parameters, bodies.

Every function here returns text whose lines are at most 998 octets (RFC 5322 2.1.1) for
any input, and at most 78 wherever the encoding leaves the choice.
"""

import binascii
import re
from collections.abc import Iterator
from urllib.parse import quote

LIMIT = 78  # characters a folded header line or an encoded body line should not pass
MAX_LINE = 998  # octets no line may pass, CRLF not counted (RFC 5322 2.1.1, RFC 5321)
WORD = 75  # the longest RFC 2047 encoded-word
# The first encoded-word of a display name may follow "Reply-To: " on its line.
PHRASE_FIRST = LIMIT - len("Reply-To: ")

# Line breaks as a submitted text holds them; each goes on the wire as CRLF.
NEWLINE = re.compile(r"\r\n|\r|\n")
# A value that can go as it is: printable ASCII words a single space apart. Anything
# else (leading, trailing or doubled spaces, tabs, controls, other characters) would
# not read back as it was, so it is encoded.
PLAIN = re.compile(r"[!-~]+(?: [!-~]+)*")
# Text a reader would take for an encoded-word (Python's parser decodes one even inside
# a word): it must be encoded itself to read back as it was.
LOOKS_ENCODED = re.compile(r"=\?.*\?=")
ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
ATOMS = re.compile(f"[{ATEXT}]+(?: [{ATEXT}]+)*")  # a phrase that needs no quotes
QUOTABLE = re.compile(r"[ -~]*")  # a phrase that reads back as it was once quoted
# Octets the Q encoding writes as they are in any header, phrases included (RFC 2047
# 5(3)); "=", "?" and "_" are not among them.
Q_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!*+-/")
Q_TABLE = {c: chr(c) if c in Q_SAFE else "_" if c == 32 else f"={c:02X}" for c in range(256)}
# RFC 2231 attribute-char: what a parameter value holds unescaped.
ATTRIBUTE_SAFE = "!#$&+-.^_`|~"


def fold(name: str, tokens: list[str]) -> bytes:
    """A header field: the name, the tokens a space apart, folded before a token where a
    line would pass LIMIT; the first token always beside the name, so nothing is added
    before the value. Lines stay within MAX_LINE while every token fits one."""
    lines, line = [], f"{name}:"
    for index, token in enumerate(tokens):
        if index and len(line) + 1 + len(token) > LIMIT:
            lines.append(line)
            line = ""
        line = f"{line} {token}"
    lines.append(line)
    return ("\r\n".join(lines) + "\r\n").encode()


def encoded_words(text: str, first: int = WORD) -> list[str]:
    """text as UTF-8 encoded-words of at most WORD characters, the first of at most first.

    Q where most of it is ASCII letters and digits, else B (whichever is shorter). Words
    end between characters, never inside one. UnicodeEncodeError for lone surrogates.
    """
    data = text.encode()
    q_size = sum(1 if c in Q_SAFE or c == 32 else 3 for c in data)
    if q_size <= len(data) * 4 // 3 + 2:
        pieces = ["".join([Q_TABLE[c] for c in ch.encode()]) for ch in text]
        return _packed(pieces, "=?utf-8?q?", first)
    sizes = [len(ch.encode()) for ch in text]
    words, start, size, room = [], 0, 0, _b_room(first)
    for index, octets in enumerate(sizes):
        if size + octets > room and index > start:
            words.append(_b_word(text[start:index]))
            start, size, room = index, 0, _b_room(WORD)
        size += octets
    words.append(_b_word(text[start:]))
    return words


def _b_room(width: int) -> int:
    """Octets a B word of at most width characters holds (at least one character's worth)."""
    return max((width - 12) // 4 * 3, 4)


def _b_word(text: str) -> str:
    return f"=?utf-8?b?{binascii.b2a_base64(text.encode(), newline=False).decode()}?="


def _packed(pieces: list[str], opening: str, first: int) -> list[str]:
    """Encoded pieces (one a character) joined into words of at most first, then WORD."""
    words, current, room = [], "", max(first, 16) - len(opening) - 2
    for piece in pieces:
        if current and len(current) + len(piece) > room:
            words.append(f"{opening}{current}?=")
            current, room = "", WORD - len(opening) - 2
        current += piece
    words.append(f"{opening}{current}?=")
    return words


def unstructured(name: str, value: str, *, long_words: bool = False) -> bytes:
    """An unstructured header (RFC 5322 3.2.5): as it is where that reads back the same and
    folds to short lines, else encoded. long_words keeps an ASCII word that cannot fit 78
    characters (a URL in a custom header, whose syntax outbox does not know) up to 998."""
    if not value:
        return f"{name}:\r\n".encode()
    if PLAIN.fullmatch(value) and not LOOKS_ENCODED.search(value):
        words = value.split(" ")
        limit = MAX_LINE if long_words else LIMIT
        if len(name) + 2 + len(words[0]) <= limit and all(len(w) < limit for w in words):
            return fold(name, words)
    return fold(name, encoded_words(value, LIMIT - len(name) - 2))


def phrase(name: str) -> list[str]:
    """A display name as the tokens of an RFC 5322 phrase: atoms, one quoted string, or
    encoded-words for anything that would not read back the same."""
    if not LOOKS_ENCODED.search(name):
        if ATOMS.fullmatch(name) and len(name) <= 60:
            return name.split(" ")
        if QUOTABLE.fullmatch(name) and len(name) <= 60:
            return ['"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"']
    return encoded_words(name, PHRASE_FIRST)


def parameters(value: str, params: list[tuple[str, str]]) -> list[str]:
    """A Content-Type or Content-Disposition value as fold() tokens: each parameter quoted,
    or RFC 2231-encoded (UTF-8, continued over lines) where it is not short plain ASCII."""
    tokens = [value]
    for key, text in params:
        plain = PLAIN.fullmatch(text) and not LOOKS_ENCODED.search(text)
        if plain and len(key) + len(text) < 60 and '"' not in text:
            tokens.append(f'{key}="' + text.replace("\\", "\\\\") + '"')
            continue
        pieces = [quote(ch, safe=ATTRIBUTE_SAFE) for ch in text]
        if sum(map(len, pieces)) + len(key) < 60:
            tokens.append(f"{key}*=UTF-8''{''.join(pieces)}")
            continue
        section, current = 0, "UTF-8''"
        for piece in pieces:
            if len(current) + len(piece) > 60:
                tokens.append(f"{key}*{section}*={current}")
                section, current = section + 1, ""
            current += piece
        tokens.append(f"{key}*{section}*={current}")
    return [*(token + ";" for token in tokens[:-1]), tokens[-1]]


def lines(text: str) -> bytes:
    """A submitted text as UTF-8 with CR, LF and CRLF each made CRLF; UnicodeEncodeError
    for lone surrogates."""
    if "\r" not in text:
        return text.replace("\n", "\r\n").encode()
    return NEWLINE.sub("\r\n", text).encode()


def longest_line(data: bytes) -> int:
    """Octets in the longest CRLF-ended line of data."""
    if len(data) <= MAX_LINE:
        return len(data)
    return max(map(len, data.split(b"\r\n")))


def quoted_printable(data: bytes, closed: bool) -> bytes:
    """data (CRLF line breaks) quoted-printable, lines of at most 76 characters with CRLF.

    closed: the part's last line break is written after it (a multipart delimiter's);
    else a last line without one ends in a soft break, so that SMTP's line end is not
    read as part of the text.
    """
    text = binascii.b2a_qp(data, istext=True).replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    if not closed and text and not text.endswith(b"\r\n"):
        text += b"=\r\n"
    return text


def base64_size(size: int) -> int:
    """Characters of size octets as base64 lines of 76, each with its CRLF."""
    chars = -(-size // 3) * 4
    return chars + 2 * -(-chars // 76)


# Raw bytes base64-encoded at a time: 57 bytes make one 76-character line; a block is
# about 620 KiB on the wire, so a large attachment is never held encoded whole.
BLOCK_BYTES = 57 * 8192


def base64_blocks(data: bytes) -> Iterator[bytes]:
    """data as base64 lines of 76 characters, each with its CRLF, a block at a time."""
    view = memoryview(data)
    for start in range(0, len(view), BLOCK_BYTES):
        text = binascii.b2a_base64(view[start : start + BLOCK_BYTES], newline=False)
        yield b"".join([text[i : i + 76] + b"\r\n" for i in range(0, len(text), 76)])


def body(text: str, eight_bit: bool, closed: bool) -> tuple[str, bytes]:
    """A text part's Content-Transfer-Encoding and its encoded body.

    7bit for ASCII with every line within 998 octets; 8bit for other such text if the
    server takes it (eight_bit); else quoted-printable or base64, whichever is shorter.
    closed: a multipart delimiter follows the body, so a text without a final line break
    can go as it is; a single part's cannot (SMTP ends every mail with a line break).
    """
    data = lines(text)
    ends = closed or not data or data.endswith(b"\r\n")
    if ends and b"\0" not in data and longest_line(data) <= MAX_LINE:
        if data.isascii():
            return "7bit", data
        if eight_bit:
            return "8bit", data
    qp = quoted_printable(data, closed)
    if len(qp) <= base64_size(len(data)):
        return "quoted-printable", qp
    return "base64", b"".join(base64_blocks(data))
