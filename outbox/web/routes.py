"""The routes page: each SMTP route with its limits and health, the rules, the domain limits."""

from flask import Blueprint, current_app, render_template
from flask.typing import ResponseReturnValue
from flask_login import login_required

from outbox.capabilities import routes
from outbox.capabilities.routes import config as routes_file
from outbox.capabilities.routes import health

bp = Blueprint("routes", __name__, url_prefix="/routes")
bp.before_request(login_required(lambda: None))

TLS = {(False, False): "none", (False, True): "STARTTLS", (True, False): "TLS", (True, True): "TLS"}


@bp.get("")
def index() -> ResponseReturnValue:
    table = routes.table()
    setting = current_app.config["ROUTES"]
    source = routes_file.path_of(str(setting), current_app.instance_path) if setting else None
    return render_template("routes/index.html", table=table, health=health.read(table.routes),
                           source=source, tls=TLS, conditions=conditions)  # fmt: skip


def conditions(rule: routes.Rule) -> list[str]:
    """What a rule asks of a message, in words."""
    said = [f"from {rule.sender_domain}"] if rule.sender_domain else []
    if rule.recipient_domain:
        said.append(f"every recipient at {rule.recipient_domain}")
    if rule.min_priority is not None:
        said.append(f"priority {rule.min_priority} or more")
    return said or ["every other message"]
