"""What DKIM signing costs a worker per mail, beside rendering the same mail unsigned.

    .venv/bin/python bench/dkimcost.py      # 2 KB text and 50 KB HTML, RSA-2048 and Ed25519
    .venv/bin/python bench/dkimcost.py --seconds 3  # longer runs, steadier figures

Each case makes the mail from a stored row (mime.prepare, then for_server for a server
offering 8BITMIME) and joins its pieces, as a worker does for each mail, in a loop on
one core for --seconds of CPU: unsigned, signed by outbox (dkimpy's canonicalization and
layout, OpenSSL's key operation), and signed by dkimpy's own dkim.sign() on the joined
bytes (its pure-Python RSA). It prints µs of CPU per mail and mails a second on one core,
and the signing's share beside the unsigned render. --attachment-mib measures the peak
Python heap (tracemalloc) of rendering a mail with an attachment that large, unsigned and
signed: the body is hashed as it streams, a block at a time. No database or server.
"""

import argparse
import base64
import time
import tracemalloc
from collections.abc import Callable
from types import SimpleNamespace

import dkim
from cryptography.hazmat.primitives import serialization

from outbox.capabilities.dkim import keys
from outbox.core.checks import Upload
from outbox.mail import mime, signing
from outbox.mail.rendered import Features

NAMES = [b"from", b"to", b"subject", b"date", b"message-id", b"mime-version", b"content-type",
         b"from"]  # the headers outbox signs in these mails  # fmt: skip

SERVER = Features(eight_bit=True, smtputf8=True)
MIB = 1024 * 1024


def row(text: str | None, html: str | None) -> SimpleNamespace:
    """A stored message as the worker reads it."""
    return SimpleNamespace(
        subject="Your order 4711 has shipped", from_addr="shop@example.com", from_name="Shop",
        reply_to=None, reply_to_name="", text_body=text, html_body=html, headers={},
        recipients=[{"kind": "to", "address": "ann@example.net", "name": "Ann Example"}],
        message_id="<4711.1@example.com>",
    )  # fmt: skip


CASES = {
    "2 KB text": row(("Dear Ann, your parcel is on its way. " * 55)[:2048], None),
    "50 KB HTML": row("See the HTML part.", "<p>" + "minified html " * 3600 + "</p>"),
}


def signer(kind: str) -> tuple[signing.Signer, bytes]:
    """A fresh key as a worker signs with it, and what dkim.sign() takes for it."""
    pair = keys.make_pair(kind)
    private = serialization.load_pem_private_key(pair.private_pem.encode(), None)
    found = signing.Signer(b"example.com", b"s1", pair.algorithm.encode(), private)  # type: ignore[arg-type]
    if kind == "rsa":
        return found, pair.private_pem.encode()
    raw = private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())  # fmt: skip
    return found, base64.b64encode(raw)


def render(stored: SimpleNamespace, signers: tuple[signing.Signer, ...] = (),
           attachments: mime.Attachments | None = None) -> bytes:  # fmt: skip
    mail = mime.prepare(stored, attachments or [])  # type: ignore[arg-type]
    mail.signers = signers
    return b"".join(mail.for_server(SERVER).data.pieces())


def per_mail(work: Callable[[], object], seconds: float) -> float:
    """CPU µs one call of work takes, over at least seconds of CPU."""
    work()
    count, start = 0, time.process_time()
    while (spent := time.process_time() - start) < seconds:
        for _ in range(10):
            work()
        count += 10
    return spent / count * 1e6


def memory(mib: int, key: signing.Signer) -> None:
    """Peak Python heap while a mail with an attachment of mib MiB is rendered and sent out."""
    attachment = [Upload("big.bin", "application/octet-stream", bytes(range(256)) * (mib * 4096))]
    for label, signers in (("unsigned", ()), ("signed", (key,))):
        tracemalloc.start()
        mail = mime.prepare(CASES["2 KB text"], attachment)  # type: ignore[arg-type]
        mail.signers = signers
        sent = sum(len(piece) for piece in mail.for_server(SERVER).data.pieces())
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{mib} MiB attachment, {label}: {sent / MIB:.1f} MiB sent, "
              f"peak heap {peak / MIB:.1f} MiB besides the attachment's own bytes")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per figure")
    parser.add_argument("--attachment-mib", type=int, default=20, help="0: skip the memory part")
    args = parser.parse_args()
    signers = {"RSA-2048": signer("rsa"), "Ed25519": signer("ed25519")}
    algorithms = {"RSA-2048": b"rsa-sha256", "Ed25519": b"ed25519-sha256"}
    print(f"{'mail':<11} {'signature':<24} {'µs/mail':>8} {'mails/s':>8} {'signing adds':>13}")
    for name, stored in CASES.items():
        plain = per_mail(lambda s=stored: render(s), args.seconds)
        print(f"{name:<11} {'none (render only)':<24} {plain:8.0f} {1e6 / plain:8.0f}")
        for label, (key, theirs) in signers.items():
            ours = per_mail(lambda s=stored, k=key: render(s, (k,)), args.seconds)
            print(f"{name:<11} {label + ', outbox':<24} {ours:8.0f} {1e6 / ours:8.0f} "
                  f"{ours - plain:10.0f} µs")  # fmt: skip
            message = render(stored)

            def dkimpy(m: bytes = message, k: bytes = theirs, a: bytes = algorithms[label]) -> None:
                dkim.sign(m, b"s1", b"example.com", k, signature_algorithm=a,
                          canonicalize=(b"relaxed", b"relaxed"), include_headers=NAMES)  # fmt: skip

            alone = per_mail(dkimpy, args.seconds)
            print(f"{name:<11} {label + ', dkim.sign() alone':<24} {alone:8.0f} {1e6 / alone:8.0f}")
    if args.attachment_mib:
        memory(args.attachment_mib, signers["RSA-2048"][0])


if __name__ == "__main__":
    main()
