"""Guardrails: rolling bounce, complaint and refusal rates per sending domain and stream, and
the pause of a domain's broadcast mail that one over its threshold puts in force."""
