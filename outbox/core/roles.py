"""Who may do what: the staff roles, the actions each allows, and the API token scopes."""

# The roles, least to most: each may do all that the ones before it may.
ROLES = ("viewer", "sender", "admin")
# The changing actions of the pages, each with the least role that may do it.
ACTIONS = {
    "compose": "sender",
    "resend": "sender",
    "cancel": "sender",
    "send_now": "sender",
    "send_again": "sender",
    "bulk": "sender",
    "resend_all": "admin",
    "pause": "admin",
    "accounts": "admin",
    "tokens": "admin",
    "audit": "admin",
    "suppress": "sender",  # suppression: add to and remove from the list
    "suppressions_import": "admin",  # suppression: CSV import
    "webhooks": "admin",  # webhooks: endpoints, send again, test events
    "guardrails": "admin",  # guardrails: resume a domain's broadcast mail
}
# What an API token may do: enqueue, read (GET), and move messages (resend, cancel).
SCOPES = ("send", "read", "manage")
ALL_SCOPES = " ".join(SCOPES)


def allows(role: str | None, action: str) -> bool:
    """Whether a role may do an action, or has at least the role named instead.

    An unknown role or action may do nothing.
    """
    needed = action if action in ROLES else ACTIONS.get(action)
    if role not in ROLES or needed is None:
        return False
    return ROLES.index(role) >= ROLES.index(needed)
