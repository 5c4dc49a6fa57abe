"""DNS questions of one round of checks: each asked once, and none after one goes unanswered.

A dead resolver would otherwise cost its timeout for every question of every domain.
"""

import dns.exception
import dns.resolver


class Unanswered(Exception):
    """DNS gave no answer (a timeout, no server answering): the check cannot say."""


class Asker:
    """Questions to one resolver, their answers kept for the round."""

    def __init__(self, resolver: dns.resolver.Resolver) -> None:
        self.resolver = resolver
        self.answers: dict[tuple[str, str], list[str]] = {}
        self.failed: str | None = None

    def ask(self, name: str, kind: str) -> list[str]:
        """The records of kind at name as text; [] when there are none or the name is not."""
        key = (name.lower().rstrip("."), kind)
        if key in self.answers:
            return self.answers[key]
        if self.failed is not None:
            raise Unanswered(self.failed)
        try:
            answer = self.resolver.resolve(key[0] + ".", kind, search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            found: list[str] = []
        except dns.exception.Timeout:
            self.failed = f"DNS gave no answer within {self.resolver.lifetime:g} s"
            raise Unanswered(self.failed) from None
        except dns.resolver.NoNameservers as exc:
            self.failed = f"no DNS server answered: {exc}"
            raise Unanswered(self.failed) from None
        else:
            found = [_text(record, kind) for record in answer]
        self.answers[key] = found
        return found

    def txt(self, name: str) -> list[str]:
        return self.ask(name, "TXT")

    def addresses(self, name: str) -> list[str]:
        return self.ask(name, "A") + self.ask(name, "AAAA")

    def exchanges(self, name: str) -> list[str]:
        """The MX hosts of name, most preferred first; "." for a null MX (RFC 7505)."""
        found = sorted((line.split() for line in self.ask(name, "MX")), key=lambda p: int(p[0]))
        return [host.rstrip(".") or "." for _, host in found]


def _text(record: object, kind: str) -> str:
    if kind == "TXT":
        return b"".join(record.strings).decode("ascii", "replace")  # type: ignore[attr-defined]
    return str(record.to_text())  # type: ignore[attr-defined]
