"""DKIM: keys per domain (`keys`), the workers' copy of them (`keyring`), signing
over a mail's wire bytes (`signing`), and `outbox dkim` (`cli`)."""
