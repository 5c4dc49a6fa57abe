"""DKIM-Signature headers over a mail's wire bytes, as its server will receive them.

dkimpy does the message side: which headers are signed and how (select_headers,
hash_headers), relaxed canonicalization, the tag layout and folding of its own sign(); the
signature header is byte for byte what dkim.DKIM.sign() writes (tests/unit/test_dkim_signing.py
holds it to that). Two things differ. The private-key operation is OpenSSL's (the
cryptography package): dkimpy's RSA is pure Python, and its sign() took 6.9 ms a mail
where outbox's RSA-2048 signing adds 0.45 ms (bench/dkim.py). And the body is hashed as
it streams from Rendered.pieces(), a piece at a time, so a mail with attachments is never
held whole, encoded, for its signature.
"""

import base64
import hashlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import dkim
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa, utils
from dkim.canonicalization import (
    CanonicalizationPolicy,
    compress_whitespace,
    strip_trailing_whitespace,
)

from outbox.mail.rendered import Rendered

NAME = b"DKIM-Signature"
POLICY = CanonicalizationPolicy.from_c_value(b"relaxed/relaxed")
# Signed where present, From once more (oversigned: a second From added on the way breaks
# the signature). Not Content-Transfer-Encoding: the top part of a mail has none unless
# it is a single part, and a relay that converts 8bit to quoted-printable changes the body
# anyway.
SIGNED = (b"from", b"to", b"cc", b"subject", b"date", b"message-id", b"reply-to", b"mime-version",
          b"content-type", b"list-unsubscribe", b"list-unsubscribe-post")  # fmt: skip
OVERSIGNED = (b"from",)
PrivateKey = rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


@dataclass(frozen=True)
class Signer:
    """One stored key as a worker signs with it."""

    domain: bytes  # d=, A-labels
    selector: bytes  # s=
    algorithm: bytes  # a=: rsa-sha256 or ed25519-sha256
    key: PrivateKey

    def header(self, headers: list[list[bytes]], signed: Sequence[bytes], body_hash: bytes,
               now: int) -> bytes:  # fmt: skip
        """The DKIM-Signature header field for headers (as dkim.rfc822_parse gives them)."""
        fields = [
            (b"v", b"1"), (b"a", self.algorithm), (b"c", POLICY.to_c_value()), (b"d", self.domain),
            (b"i", b"@" + self.domain), (b"q", b"dns/txt"), (b"s", self.selector),
            (b"t", str(now).encode()), (b"h", b" : ".join(signed)),
            (b"bh", base64.b64encode(body_hash)),
            (b"b", b"0" * 60),  # as dkimpy does: b= folds onto lines of its own
        ]  # fmt: skip
        value = dkim.fold(b"; ".join(b"=".join(f) for f in fields), namelen=len(NAME))
        value = dkim.RE_BTAG.sub(b"\\1", value)
        hasher = hashlib.sha256()
        canonical = POLICY.canonicalize_headers(headers)
        dkim.hash_headers(hasher, POLICY, canonical, signed, (NAME, b" " + value), None)
        fields[-1] = (b"b", base64.b64encode(self._signature(hasher.digest())))
        value = b"; ".join(b"=".join(f) for f in fields) + b"\r\n"
        return NAME + b": " + dkim.fold(value, namelen=len(NAME))

    def _signature(self, digest: bytes) -> bytes:
        if isinstance(self.key, rsa.RSAPrivateKey):
            return self.key.sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256()))
        return self.key.sign(digest)  # RFC 8463: Ed25519 over the SHA-256 of the headers


def signed(data: Rendered, signers: Sequence[Signer], now: int | None = None) -> Rendered:
    """data with a DKIM-Signature by each signer first in its header, in signers' order."""
    head = data.texts[0][: data.texts[0].index(b"\r\n\r\n") + 4]
    headers, _ = dkim.rfc822_parse(head)
    present = {name.lower() for name, _ in headers}
    names = [*(name for name in SIGNED if name in present), *OVERSIGNED]
    digest = body_hash(_body(data, len(head)))
    moment = int(time.time()) if now is None else now
    lines = b"".join(s.header(headers, names, digest, moment) for s in signers)
    return replace(data, texts=[lines + data.texts[0], *data.texts[1:]])


def _body(data: Rendered, head: int) -> Iterator[bytes]:
    """The DATA after the header, in the pieces it goes out in."""
    pieces = data.pieces()
    yield next(pieces)[head:]
    yield from pieces


def _relaxed_lines(piece: bytes) -> bytes:
    """dkimpy's relaxed body rules for whitespace, run only where a piece has such whitespace.

    Its regular expressions rewrite every single space too: run on every piece, 2 ms of
    the 2.2 ms that signing a 50 KB HTML mail costs (bench/dkimcost.py).
    """
    if b"\t" in piece or b" \r\n" in piece:
        piece = strip_trailing_whitespace(piece)
    if b"\t" in piece or b"  " in piece:
        piece = compress_whitespace(piece)
    return piece


def body_hash(pieces: Iterable[bytes]) -> bytes:
    """SHA-256 of the relaxed canonical body (RFC 6376 3.4.4), hashed a piece at a time.

    Each piece must begin a line, as Rendered.pieces() are. Empty lines are held back
    until a line with content follows them: those at the end are not hashed.
    """
    hasher, held, any_line = hashlib.sha256(), b"", False
    for piece in pieces:
        piece = _relaxed_lines(piece)
        end = len(piece)
        while piece.endswith(b"\r\n", 0, end):
            end -= 2
        if end == 0:  # only line breaks: empty lines, or the end of the line before
            held += piece
            continue
        hasher.update(held)
        hasher.update(piece[:end])
        held, any_line = piece[end:], True
    if any_line:
        hasher.update(b"\r\n")  # the last line's break; the empty lines after it dropped
    return hasher.digest()
