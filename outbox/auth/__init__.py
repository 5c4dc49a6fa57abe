"""Who may do what, and who did: staff accounts, API tokens, the audit trail."""
