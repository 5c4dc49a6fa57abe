"""The HOST:PORT that `outbox smtpd` and `outbox bounces` are told to listen on."""

import click


def address(value: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) as its parts; click.BadParameter if it is not."""
    host, colon, port = value.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r} is not HOST:PORT, such as 127.0.0.1:2525")
    return host, int(port)
