"""The mailings' setting: outbox's public URL, which their unsubscribe links point to."""

from outbox.core.config_schema import TEXT, Group, Setting

# fmt: off
GROUP = Group(
    "Mailings",
    "What the mails of a mailing carry (see Mailings).",
    (
        # Needs one SECRET_KEY for the web app and the workers, which sign the links.
        Setting("UNSUBSCRIBE_URL", TEXT, None,
                description="outbox's public base URL (`https://outbox.example.com`): mailing "
                "mails carry `List-Unsubscribe` to its one-click page (see Mailings)"),
    ),
)
# fmt: on
