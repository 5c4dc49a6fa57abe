"""`outbox smtpd`'s settings: its certificate, AUTH without TLS, its connection caps."""

from outbox.core.config_schema import BOOL, INT, NUMBER, TEXT, Group, Setting
from outbox.smtp import admission

# fmt: off
GROUP = Group(
    "SMTP submission",
    "`outbox smtpd`, which takes mail from applications over SMTP (see SMTP submission).",
    (
        Setting("SMTPD_TLS_CERT", TEXT, None,
                description="the PEM certificate (chain) `outbox smtpd` offers with STARTTLS; "
                "read at start: one without `SMTPD_TLS_KEY`, or a file it cannot load, stops it "
                "with the reason"),
        Setting("SMTPD_TLS_KEY", TEXT, None,
                description="the PEM private key of `SMTPD_TLS_CERT`; read at start: one without "
                "the other, or a file it cannot load, stops it with the reason"),
        # The token crosses the network readable: for loopback only.
        Setting("SMTPD_ALLOW_PLAINTEXT_AUTH", BOOL, False,
                description="let `outbox smtpd` take AUTH without TLS (for a loopback address); "
                "it logs a warning at start. Without it and without a certificate it does not "
                "start"),
        Setting("SMTPD_MAX_CONNECTIONS", INT, 1000, unit="connections",
                description="connections `outbox smtpd` holds at once; past it a new client gets "
                "`421 4.7.0`. It raises its soft open-file limit to this plus 100, and does not "
                "start if the hard limit is lower"),
        Setting("SMTPD_MAX_CLIENT_CONNECTIONS", INT, 50, unit="connections",
                description="connections at once from one client (an IPv4 address, an IPv6 /64); "
                "past it `421 4.7.0`"),
        Setting("SMTPD_PREAUTH_TIMEOUT", NUMBER, 30.0, unit="seconds",
                description="seconds a client may stay silent before it has logged in (`421 "
                "4.4.2`); after AUTH, `--timeout`"),
    ),
    admission.check_smtpd,
)
# fmt: on
