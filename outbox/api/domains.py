"""The domain doctor over the API: each sending domain's DNS checks (kept DOMAINS_CACHE s)."""

from flask import Response, jsonify

from outbox.api.blueprint import Refused, bp
from outbox.capabilities.dkim import published
from outbox.capabilities.domains import doctor


@bp.get("/domains")
def list_domains() -> Response:
    """Every sending domain with its checks, as the Domains page shows them."""
    try:
        report = doctor.cached()
    except published.BadResolvers as exc:
        raise Refused(503, str(exc)) from None
    return jsonify(report.as_json())
