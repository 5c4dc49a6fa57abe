"""Who may hold a connection to outbox's SMTP servers: per client, in all, and a mail budget.

`outbox smtpd` and `outbox bounces --listen` both let a client in only while it holds
fewer than its share of connections and the server fewer than its total; past either
the client gets `421 4.7.0` and is closed at once, before the greeting. Without the
caps one address holding idle connections used up the process's open files and every
other client timed out. The total stays under the open-file limit, which start()
raises to what the total needs (or refuses to start). The bounce listener, open to
anyone, also gives each client a budget of mails and bytes a minute.

A client is one IPv4 address, or one IPv6 /64 (what one host is usually given).
"""

import asyncio
import ipaddress
import logging
import resource
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiosmtpd.smtp import SMTP

log = logging.getLogger("outbox.admission")

# Open files a server needs besides its clients' connections: listening sockets, the
# database pool, log files, the worker threads' handles.
RESERVED_FILES = 100
BUDGET_WINDOW = 60.0  # seconds over which a client's budget refills in full
KEPT_BUDGETS = 1024  # clients past this: the budgets back to full are forgotten


@dataclass(frozen=True)
class Limits:
    """The caps of one server: connections in all and per client; a client's budget."""

    total: int
    per_client: int
    mails: int = 0  # a client's mails a minute; 0: no budget
    size: int = 0  # a client's bytes a minute

    def check(self, prefix: str) -> None:
        """ValueError naming the setting if the caps cannot work."""
        if self.total < 1 or self.per_client < 1:
            raise ValueError(f"{prefix}_MAX_CONNECTIONS and {prefix}_MAX_CLIENT_CONNECTIONS "
                             "must be at least 1")  # fmt: skip
        if self.per_client > self.total:
            raise ValueError(f"{prefix}_MAX_CLIENT_CONNECTIONS must be at most "
                             f"{prefix}_MAX_CONNECTIONS")  # fmt: skip


def smtpd_limits(config: Any) -> Limits:
    """`outbox smtpd`'s caps from the settings (its clients AUTH, so no budget)."""
    return Limits(config["SMTPD_MAX_CONNECTIONS"], config["SMTPD_MAX_CLIENT_CONNECTIONS"])


def bounce_limits(config: Any) -> Limits:
    """`outbox bounces --listen`'s caps and each client's budget from the settings."""
    return Limits(config["BOUNCE_MAX_CONNECTIONS"], config["BOUNCE_MAX_CLIENT_CONNECTIONS"],
                  config["BOUNCE_CLIENT_MAILS"], config["BOUNCE_CLIENT_BYTES"])  # fmt: skip


def check(config: Any) -> None:
    """ValueError naming the setting if either server's caps cannot work."""
    smtpd_limits(config).check("SMTPD")
    bounces = bounce_limits(config)
    bounces.check("BOUNCE")
    if bounces.mails < 1:
        raise ValueError("BOUNCE_CLIENT_MAILS must be at least 1")
    if bounces.size < config["BOUNCE_MAX_BYTES"]:
        raise ValueError("BOUNCE_CLIENT_BYTES must be at least BOUNCE_MAX_BYTES, or the "
                         "largest bounce mail could never be taken")  # fmt: skip
    if config["SMTPD_PREAUTH_TIMEOUT"] <= 0:
        raise ValueError("SMTPD_PREAUTH_TIMEOUT must be above 0")


def open_files_for(limits: Limits) -> None:
    """Raise this process's open-file limit to what the caps need; ValueError if it cannot.

    The soft limit goes up to the hard one when needed (systemd's default is 1,024 soft,
    524,288 hard): no file is left for a new client once the soft limit is reached.
    """
    needed = limits.total + RESERVED_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise ValueError(f"{limits.total} connections need {needed} open files, and the "
                         f"limit is {hard}: raise LimitNOFILE= (ulimit -n) or lower the "
                         "MAX_CONNECTIONS setting")  # fmt: skip
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def client_of(peer: Any) -> str:
    """The client a peer counts as: its IPv4 address, or the /64 of its IPv6 address."""
    host = peer[0] if isinstance(peer, tuple) else str(peer)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # a Unix socket's path: one client
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass
class Budget:
    """What one client may still send now: mails and bytes, refilled over BUDGET_WINDOW."""

    mails: float
    size: float
    at: float

    def refill(self, limits: Limits, now: float) -> None:
        """Add what the time since the last look earned, never past the limits."""
        share = max(0.0, now - self.at) / BUDGET_WINDOW
        self.mails = min(float(limits.mails), self.mails + limits.mails * share)
        self.size = min(float(limits.size), self.size + limits.size * share)
        self.at = max(self.at, now)

    def full(self, limits: Limits) -> bool:
        return self.mails >= limits.mails and self.size >= limits.size


@dataclass
class Admission:
    """The connections each client holds and the budgets they have left, for one server.

    Used on the server's event loop only: no lock.
    """

    limits: Limits
    held: dict[str, int] = field(default_factory=dict)
    total: int = 0  # the sum of held's values, kept as they change
    budgets: dict[str, Budget] = field(default_factory=dict)

    def enter(self, client: str) -> str | None:
        """Count client in, or the 421 that turns it away."""
        if self.held.get(client, 0) >= self.limits.per_client:
            return (f"421 4.7.0 Too many connections from your address: at most "
                    f"{self.limits.per_client} at once; closing")  # fmt: skip
        if self.total >= self.limits.total:
            return (f"421 4.7.0 Too many connections: at most {self.limits.total} at once; "
                    "closing, try again later")  # fmt: skip
        self.held[client] = self.held.get(client, 0) + 1
        self.total += 1
        return None

    def leave(self, client: str) -> None:
        """Count one of client's connections out (one it was counted in with)."""
        left = self.held.pop(client) - 1
        if left:
            self.held[client] = left
        self.total -= 1

    def may_send(self, client: str, now: float) -> str | None:
        """None if client has a mail and a byte of its budget left, or the 421 saying not."""
        budget = self._budget(client, now)
        if budget is None or (budget.mails >= 1 and budget.size >= 1):
            return None
        return self._spent()

    def spend(self, client: str, size: int, now: float) -> str | None:
        """Take one mail of size bytes from client's budget, or the 421 if it is over it."""
        budget = self._budget(client, now)
        if budget is None:
            return None
        if budget.mails < 1 or budget.size < size:
            return self._spent()
        budget.mails -= 1
        budget.size -= size
        return None

    def _budget(self, client: str, now: float) -> Budget | None:
        if not self.limits.mails:
            return None
        if len(self.budgets) > KEPT_BUDGETS:
            self._forget_full(now)
        budget = self.budgets.setdefault(
            client, Budget(float(self.limits.mails), float(self.limits.size), now)
        )
        budget.refill(self.limits, now)
        return budget

    def _forget_full(self, now: float) -> None:
        for client, budget in list(self.budgets.items()):
            budget.refill(self.limits, now)
            if budget.full(self.limits):
                del self.budgets[client]

    def _spent(self) -> str:
        most = f"at most {self.limits.mails} mails and {self.limits.size} bytes a minute"
        return f"421 4.7.0 Too much mail from your address: {most}; closing, try again later"


class Admitting(Protocol):
    """A handler that carries its server's Admission."""

    admission: Admission


class AdmittedSMTP(SMTP):
    """aiosmtpd's protocol letting a client in only within the handler's Admission.

    A 421 from any hook closes the connection (RFC 5321 3.8).
    """

    def __init__(self, handler: Admitting, **options: Any) -> None:
        super().__init__(handler, **options)
        self.admission = handler.admission
        self.client: str | None = None  # set while counted in
        self.refusal: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        after_starttls = self._original_transport is not None  # the same client, now in TLS
        super().connection_made(transport)
        if after_starttls:
            return
        client = client_of(transport.get_extra_info("peername"))
        self.refusal = self.admission.enter(client)
        if self.refusal is None:
            self.client = client
        else:
            log.info("connection from %s refused: %s", client, self.refusal)

    def connection_lost(self, error: Exception | None) -> None:
        if self.client is not None:
            self.admission.leave(self.client)
            self.client = None
        super().connection_lost(error)

    async def _handle_client(self) -> None:
        if self.refusal is None:
            await super()._handle_client()
            return
        self._writer.write(f"{self.refusal}\r\n".encode())
        if self.transport is not None:
            self.transport.close()

    async def push(self, status: Any) -> None:
        await super().push(status)
        if isinstance(status, str) and status.startswith("421") and self.transport:
            self.transport.close()
