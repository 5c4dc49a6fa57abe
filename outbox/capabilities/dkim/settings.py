"""DKIM's settings: how often the processes reread the keys, the DNS servers checks ask."""

from outbox.core.config_schema import NUMBER, TEXT, Group, Setting

# fmt: off
GROUP = Group(
    "DKIM",
    "Signing with the keys of `outbox dkim` (see DKIM).",
    (
        Setting("DKIM_REFRESH", NUMBER, 60.0, unit="seconds",
                description="seconds between each process's rereads of the DKIM keys (`outbox "
                "dkim`): a key added or removed is used or dropped within this time (see DKIM)"),
        Setting("DNS_RESOLVERS", TEXT, "",
                description="DNS servers `outbox dkim check` asks, `host[:port]` comma-separated, "
                "IPv6 as `[addr]:port`; empty: the system's"),
    ),
)
# fmt: on
