"""The guardrails' settings: the rates that pause a domain's broadcast mail, and how much
mail a rate needs before it counts."""

from typing import Any

from outbox.core.config_schema import INT, NUMBER, Group, Setting

RATES = ("GUARDRAIL_BOUNCE_RATE", "GUARDRAIL_COMPLAINT_RATE", "GUARDRAIL_REFUSAL_RATE")


def check(config: Any) -> None:
    """ValueError naming the setting if a rate is not a per cent above 0, or the minimum
    is below 1."""
    for name in RATES:
        if not 0 < config[name] <= 100:
            raise ValueError(f"{name} must be a per cent above 0 and at most 100")
    if config["GUARDRAIL_MIN_RECIPIENTS"] < 1:
        raise ValueError("GUARDRAIL_MIN_RECIPIENTS must be at least 1")


# fmt: off
GROUP = Group(
    "Guardrails",
    "The rates over which a sending domain's broadcast mail is paused until an admin "
    "resumes it (see Deliverability).",
    (
        Setting("GUARDRAIL_BOUNCE_RATE", NUMBER, 5.0, unit="per cent",
                description="hard bounces over the recipients sent, in the last 24 hours or 7 "
                "days, past which a domain's broadcast mail is paused"),
        Setting("GUARDRAIL_COMPLAINT_RATE", NUMBER, 0.3, unit="per cent",
                description="complaints (feedback reports) over the recipients sent, in the "
                "last 24 hours or 7 days, past which a domain's broadcast mail is paused"),
        Setting("GUARDRAIL_REFUSAL_RATE", NUMBER, 10.0, unit="per cent",
                description="recipients refused for good at SMTP (5xx) over the recipients "
                "tried, in the last 24 hours or 7 days, past which a domain's broadcast mail "
                "is paused"),
        Setting("GUARDRAIL_MIN_RECIPIENTS", INT, 100, unit="recipients",
                description="the fewest recipients a window must hold before its rates can "
                "pause anything"),
    ),
    check,
)
# fmt: on
