"""STARTTLS for `outbox smtpd`: the server context from SMTPD_TLS_CERT and SMTPD_TLS_KEY."""

import ssl
from collections.abc import Mapping
from typing import Any


def server_context(config: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The context STARTTLS offers, None with neither setting; ValueError naming a bad one.

    Python's defaults for a server: TLS 1.2 or later, no client certificate asked for.
    The files are read once, at start: a renewed certificate needs a restart.
    """
    cert, key = config["SMTPD_TLS_CERT"], config["SMTPD_TLS_KEY"]
    if not cert and not key:
        return None
    if not cert or not key:
        raise ValueError(
            "set both OUTBOX_SMTPD_TLS_CERT and OUTBOX_SMTPD_TLS_KEY (the certificate and "
            "its private key, PEM), or neither"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"cannot load the STARTTLS certificate {cert} with the key {key} "
            f"(OUTBOX_SMTPD_TLS_CERT, OUTBOX_SMTPD_TLS_KEY): {exc}"
        ) from None
    return context
