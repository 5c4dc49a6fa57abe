"""The checks of each sending domain, with a verdict, the record found, the record to publish
and why; a round of them over every domain, kept DOMAINS_CACHE seconds for pages and API."""

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from flask import current_app

from outbox.capabilities.dkim import keys, published
from outbox.capabilities.domains import dmarc, spf
from outbox.capabilities.domains.asking import Asker, Unanswered
from outbox.capabilities.domains.sending import BOUNCES, FROM, SIGNS, Outgoing, Sending
from outbox.capabilities.domains.sending import outgoing as outgoing_of
from outbox.capabilities.domains.sending import read as read_sending
from outbox.models import utcnow

OK, WARNING, PROBLEM = "ok", "warning", "problem"
VERDICTS = (OK, WARNING, PROBLEM)  # in rising order of trouble
KEY = "outbox.domains"  # where an app keeps its last round, in app.extensions
NO_PTR = ("PTR is not checked: the routes file names no source address outbox sends from "
          "(the relay's own address is what receivers look up)")  # fmt: skip


@dataclass(frozen=True)
class Check:
    """One check of one domain."""

    name: str  # SPF, DKIM, DMARC, MX, MTA-STS, TLS-RPT
    verdict: str  # ok, warning or problem
    found: str | None  # the record(s) DNS holds, None if none
    publish: str | None  # the record to publish (a zone file line), None if nothing to change
    why: str


@dataclass(frozen=True)
class Domain:
    name: str
    roles: tuple[str, ...]  # from, dkim, bounces (sending.FROM, SIGNS, BOUNCES)
    checks: tuple[Check, ...]

    @property
    def verdict(self) -> str:
        return worst(check.verdict for check in self.checks)


@dataclass(frozen=True)
class Report:
    domains: tuple[Domain, ...]
    notes: tuple[str, ...]  # what was not checked, and why
    checked_at: datetime

    @property
    def verdict(self) -> str:
        return worst(domain.verdict for domain in self.domains)

    def as_json(self) -> dict[str, Any]:
        """The report as the API and `--json` give it."""
        return {
            "checked_at": self.checked_at.isoformat(timespec="seconds") + "Z",
            "verdict": self.verdict,
            "notes": list(self.notes),
            "domains": [{"domain": d.name, "roles": list(d.roles), "verdict": d.verdict,
                         "checks": [asdict(c) for c in d.checks]} for d in self.domains],
        }  # fmt: skip


def worst(verdicts: Any) -> str:
    return max(verdicts, key=VERDICTS.index, default=OK)


def txt_line(name: str, text: str) -> str:
    return f'{name}. IN TXT "{text}"'


def run(config: Any, now: datetime) -> Report:
    """Check every sending domain now, asking DNS_RESOLVERS (published.resolver)."""
    sending = read_sending(config, now)
    resolver = published.resolver(config["DNS_RESOLVERS"])
    resolver.lifetime = config["DOMAINS_DNS_TIMEOUT"]
    asker = Asker(resolver)
    outgoing, notes = outgoing_of(asker)
    domains = tuple(
        Domain(name, tuple(sorted(roles)), checks_of(name, sending, asker, outgoing))
        for name, roles in sorted(sending.roles.items())
    )
    return Report(domains, (*notes, NO_PTR), now)


@dataclass
class Kept:
    """An app's last round and when it was made (time.monotonic), one round at a time."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    at: float | None = None
    report: Report | None = None


def cached(refresh: bool = False) -> Report:
    """The app's last round if younger than DOMAINS_CACHE seconds, else a new one."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    kept: Kept = app.extensions.setdefault(KEY, Kept())
    with kept.lock:  # a second request waits for the round under way and takes its answer
        age = None if kept.at is None else time.monotonic() - kept.at
        if refresh or kept.report is None or age is None or age >= app.config["DOMAINS_CACHE"]:
            kept.report, kept.at = run(app.config, utcnow()), time.monotonic()
        return kept.report


def checks_of(
    domain: str, sending: Sending, asker: Asker, outgoing: list[Outgoing]
) -> tuple[Check, ...]:
    """The checks that apply to the domain's roles, each answering even when DNS does not."""
    roles = sending.roles[domain]
    wanted: list[tuple[str, Callable[[], Check | None]]] = [
        ("SPF", lambda: spf_check(domain, sending, asker, outgoing)),
    ]
    if FROM in roles or SIGNS in roles:
        wanted.append(("DKIM", lambda: dkim_check(domain, sending, asker)))
    if FROM in roles:
        wanted.append(("DMARC", lambda: dmarc_check(domain, sending, asker)))
    if sending.is_envelope(domain) or BOUNCES in roles:
        wanted.append(("MX", lambda: mx_check(domain, asker)))
    wanted.append(("MTA-STS", lambda: mta_sts_check(domain, asker)))
    wanted.append(("TLS-RPT", lambda: tls_rpt_check(domain, asker)))
    found = []
    for name, check in wanted:
        try:
            result = check()
        except Unanswered as exc:
            result = Check(name, PROBLEM, None, None, f"not checked: {exc}")
        if result is not None:
            found.append(result)
    return tuple(found)


def spf_check(domain: str, sending: Sending, asker: Asker, outgoing: list[Outgoing]) -> Check:
    """One SPF record that parses, within 10 look-ups, no loop, authorising the routes' servers."""
    envelope = sending.is_envelope(domain)
    mechanisms = _ip_terms(out.address for out in outgoing)
    suggested = txt_line(domain, f"v=spf1 {mechanisms + ' ' if mechanisms else ''}-all")
    try:
        record = spf.record_of(domain, asker.txt)
    except spf.Malformed as exc:
        found = " | ".join(t for t in asker.txt(domain) if spf.is_spf(t))
        return Check("SPF", PROBLEM, found, suggested, f"{exc}: receivers treat it as an error "
                     "(permerror); merge them into one record")  # fmt: skip
    if record is None:
        if envelope:
            return Check("SPF", PROBLEM, None, suggested, "no SPF record: receivers cannot tell "
                         "outbox's servers from forgers, and mail fails SPF")  # fmt: skip
        return Check("SPF", WARNING, None, txt_line(domain, "v=spf1 -all"),
                     "no SPF record; mail goes with another envelope domain, so `-all` says "
                     "no server sends with this one")  # fmt: skip
    walked = spf.walk(domain, asker.txt)
    if walked.error:
        return Check("SPF", PROBLEM, record, None, f"{walked.error}: receivers treat the record "
                     "as an error (permerror)")  # fmt: skip
    if walked.loops:
        loops = "; ".join(walked.loops)
        why = f"the record includes itself ({loops}): receivers stop the loop with permerror"
        return Check("SPF", PROBLEM, record, None, why)
    if walked.lookups > spf.MAX_LOOKUPS:
        return Check("SPF", PROBLEM, record, None, f"{walked.lookups} DNS look-ups over its "
                     f"includes, more than the {spf.MAX_LOOKUPS} RFC 7208 allows: receivers "
                     "give permerror. Replace includes with the ip4:/ip6: ranges they list, "
                     "or drop senders no longer used")  # fmt: skip
    if not envelope:
        return Check("SPF", OK, record, None, f"parses, {walked.lookups} look-ups of "
                     f"{spf.MAX_LOOKUPS}; mail goes with another envelope domain")  # fmt: skip
    refused: dict[Outgoing, str] = {}
    for out in outgoing:
        result = spf.authorises(domain, out.address, asker.txt, asker.addresses, asker.exchanges)
        if result != "pass":
            refused[out] = result
    if refused:
        terms = _ip_terms(out.address for out in refused)
        said = [f"route {o.route} ({o.host}, {o.address}) gets {r}" for o, r in refused.items()]
        fixed = record.replace("v=spf1", f"v=spf1 {terms}", 1)
        return Check("SPF", PROBLEM, record, txt_line(domain, fixed),
                     "the record does not authorise the servers outbox sends through: "
                     + "; ".join(said))  # fmt: skip
    checked = f"; authorises {len(outgoing)} route address(es)" if outgoing else ""
    return Check(
        "SPF", OK, record, None, f"parses, {walked.lookups} look-ups of {spf.MAX_LOOKUPS}{checked}"
    )


def _ip_terms(addresses: Iterable[spf.IP]) -> str:
    """The ip4: and ip6: terms that authorise each address, once each, in order."""
    found = sorted(set(addresses), key=lambda a: (a.version, a))
    return " ".join(f"ip{a.version}:{a}" for a in found)


def dkim_check(domain: str, sending: Sending, asker: Asker) -> Check:
    """Each key of the domain published as stored (`outbox dkim check`'s check)."""
    own = sending.keys.get(domain, [])
    if not own:
        signer = sending.signing_domain(domain)
        if signer is None:
            return Check("DKIM", WARNING, None, None, "no DKIM key: mail from this domain goes "
                         f"unsigned; add one with `outbox dkim add {domain} --selector s1` and "
                         "publish the record it prints")  # fmt: skip
        return Check("DKIM", OK, None, None, f"signed with the keys of {signer} (d={signer}), "
                     "checked under that domain")  # fmt: skip
    if asker.failed is not None:
        raise Unanswered(asker.failed)  # each key would wait its own timeout
    findings = [(key, published.check(key, asker.resolver)) for key in own]
    bad = [(key, f) for key, f in findings if f.problem is not None]
    names = ", ".join(f.name for _, f in findings)
    if bad:
        why = "; ".join(f"{f.name}: {f.problem}" for _, f in bad)
        if any(
            "no answer" in (f.problem or "") or "no DNS server" in (f.problem or "") for _, f in bad
        ):
            return Check("DKIM", PROBLEM, names, None, f"not checked: {why}")
        return Check("DKIM", PROBLEM, names, "\n".join(keys.zone_line(k) for k, _ in bad),
                     f"{why}: mail signed with such a key fails DKIM")  # fmt: skip
    return Check("DKIM", OK, names, None, f"{len(own)} key(s) published as stored")


def _dmarc_records(domain: str, asker: Asker) -> tuple[str, list[str]]:
    """Where the DMARC policy of domain comes from and the records there (RFC 7489 6.6.3)."""
    records = [t for t in asker.txt(f"_dmarc.{domain}") if dmarc.is_dmarc(t)]
    org = dmarc.organisational(domain)
    if not records and org != domain:
        return org, [t for t in asker.txt(f"_dmarc.{org}") if dmarc.is_dmarc(t)]
    return domain, records


def dmarc_check(domain: str, sending: Sending, asker: Asker) -> Check:
    """One _dmarc record that parses, and From aligned with DKIM's d= and the envelope."""
    where, records = _dmarc_records(domain, asker)
    name = f"_dmarc.{where}"
    suggested = txt_line(f"_dmarc.{domain}", f"v=DMARC1; p=none; rua=mailto:dmarc-reports@{domain}")
    if not records:
        why = "no DMARC record: large mailbox providers ask bulk senders for one; start "
        return Check("DMARC", WARNING, None, suggested, why + "with p=none and read its reports")
    found = " | ".join(records)
    if len(records) > 1:
        return Check("DMARC", PROBLEM, found, None, f"{len(records)} DMARC records at {name}: "
                     "receivers then apply none (RFC 7489 6.6.3); keep one")  # fmt: skip
    try:
        record = dmarc.parse(records[0])
    except dmarc.Malformed as exc:
        return Check("DMARC", PROBLEM, found, suggested, f"{exc}: receivers discard the record")
    policy = record.policy
    if where != domain and record.subdomain_policy:
        policy = record.subdomain_policy
    signer = sending.signing_domain(domain)
    envelope = sending.envelope_domain(domain)
    dkim_mode, spf_mode = ("strict" if record.dkim_strict else "relaxed",
                           "strict" if record.spf_strict else "relaxed")  # fmt: skip
    dkim_ok = signer is not None and dmarc.aligned(signer, domain, record.dkim_strict)
    spf_ok = dmarc.aligned(envelope, domain, record.spf_strict)
    dkim_said = (f"DKIM d={signer} {'aligns' if dkim_ok else 'does not align'} ({dkim_mode})"
                 if signer else "no DKIM signature")  # fmt: skip
    spf_said = f"envelope {envelope} {'aligns' if spf_ok else 'does not align'} ({spf_mode})"
    said = f"p={policy} at {name}; {dkim_said}; {spf_said}"
    if policy in ("quarantine", "reject") and not dkim_ok:
        fix = f"sign with a key of {domain} (`outbox dkim add {domain} --selector s1`)"
        return Check("DMARC", PROBLEM, found, None, f"{said}: without aligned DKIM, mail that "
                     f"is forwarded fails DMARC and is {policy}ed; {fix}")  # fmt: skip
    if not dkim_ok and not spf_ok:
        return Check("DMARC", PROBLEM if policy != "none" else WARNING, found, None,
                     f"{said}: every mail fails DMARC")  # fmt: skip
    if policy == "none":
        return Check("DMARC", OK, found, None, f"{said}; p=none only asks for reports")
    return Check("DMARC", OK, found, None, said)


def mx_check(domain: str, asker: Asker) -> Check:
    """Bounces and replies to the envelope domain need somewhere to go."""
    hosts = asker.exchanges(domain)
    if hosts == ["."]:
        return Check("MX", PROBLEM, "0 .", None, "a null MX (RFC 7505): the domain takes no "
                     "mail, so bounces are lost and receivers may refuse mail from it")  # fmt: skip
    if hosts:
        return Check("MX", OK, ", ".join(hosts), None, "bounces to this domain have a server")
    if asker.addresses(domain):
        return Check("MX", WARNING, None, f"{domain}. IN MX 10 mail.{domain}.",
                     "no MX record: mail falls back to the domain's A/AAAA address, which "
                     "some receivers do not accept for an envelope domain")  # fmt: skip
    return Check("MX", PROBLEM, None, f"{domain}. IN MX 10 mail.{domain}.",
                 "no MX and no address: bounces cannot come back and many receivers refuse "
                 "mail whose envelope domain takes none")  # fmt: skip


def mta_sts_check(domain: str, asker: Asker) -> Check | None:
    """_mta-sts TXT (RFC 8461), reported when present."""
    return _reported(asker, "MTA-STS", f"_mta-sts.{domain}", "STSv1", "id",
                     ("senders ignore it", "senders to this domain fetch its policy"))  # fmt: skip


def tls_rpt_check(domain: str, asker: Asker) -> Check | None:
    """_smtp._tls TXT (RFC 8460), reported when present."""
    meaning = ("reporters ignore it", "TLS failures to this domain get reported")
    return _reported(asker, "TLS-RPT", f"_smtp._tls.{domain}", "TLSRPTv1", "rua", meaning)


def _reported(
    asker: Asker, name: str, at: str, version: str, needed: str, meaning: tuple[str, str]
) -> Check | None:
    """A record reported when present: one TXT of v=version with a needed= tag.

    meaning: what a broken record comes to, and what a good one does.
    """
    records = asker.txt(at)
    if not records:
        return None
    found = " | ".join(records)
    parsed = published.tags(records[0])
    if len(records) > 1 or parsed.get("v") != version or not parsed.get(needed):
        return Check(name, WARNING, found, None, f"must be one record of v={version} with "
                     f"{needed}=; {meaning[0]} otherwise")  # fmt: skip
    return Check(name, OK, found, None, f"present: {meaning[1]}")
