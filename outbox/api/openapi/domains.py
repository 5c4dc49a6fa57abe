"""The OpenAPI operation of the domain doctor: its report of each sending domain."""

from outbox.api.openapi.parts import UNAUTHORIZED, Schema, answer, closed
from outbox.capabilities.domains import doctor, sending

TEXT = {"type": "string"}
MAYBE_TEXT = {"type": ["string", "null"]}
VERDICT = {"type": "string", "enum": list(doctor.VERDICTS)}


def schemas() -> dict[str, Schema]:
    check = closed({
        "name": {**TEXT, "description": "SPF, DKIM, DMARC, MX, MTA-STS or TLS-RPT."},
        "verdict": VERDICT,
        "found": {**MAYBE_TEXT, "description": "The record(s) DNS holds; null: none."},
        "publish": {**MAYBE_TEXT, "description": "The record to publish, as zone file lines; "
                    "null: nothing to change."},
        "why": TEXT,
    })  # fmt: skip
    domain = closed({
        "domain": {**TEXT, "description": "IDNA A-labels, lower case."},
        "roles": {"type": "array", "items": {"type": "string", "enum": list(sending.ROLES)},
                  "description": "from: a From domain of the last 30 days; dkim: a DKIM key's "
                  "domain; bounces: OUTBOX_BOUNCE_ADDRESS's domain."},
        "verdict": VERDICT,
        "checks": {"type": "array", "items": {"$ref": "#/components/schemas/DomainCheck"}},
    })  # fmt: skip
    report = closed({
        "checked_at": {"type": "string", "format": "date-time"},
        "verdict": {**VERDICT, "description": "The worst verdict of any check."},
        "notes": {"type": "array", "items": TEXT, "description": "What was not checked, why."},
        "domains": {"type": "array", "items": {"$ref": "#/components/schemas/Domain"}},
    })  # fmt: skip
    return {"DomainCheck": check, "Domain": domain, "DomainReport": report}


def paths() -> dict[str, Schema]:
    listing = {
        "summary": "Each sending domain's SPF, DKIM, DMARC, MX, MTA-STS and TLS-RPT in DNS",
        "description": "Checked when asked and kept OUTBOX_DOMAINS_CACHE seconds.",
        "responses": {
            "200": answer("The report.", "DomainReport"),
            "401": UNAUTHORIZED,
            "503": answer("OUTBOX_DNS_RESOLVERS cannot be used: the error says why.", "Error"),
        },
    }
    return {"/api/domains": {"get": listing}}
