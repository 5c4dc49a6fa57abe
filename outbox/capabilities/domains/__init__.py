"""The domain doctor: for each domain outbox sends from, what DNS says about SPF, DKIM,
DMARC, MX, MTA-STS and TLS-RPT, each with a verdict, the record to publish and why."""
