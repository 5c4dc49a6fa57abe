"""End to end: worker processes, a real browser, Postfix, Dovecot, DNS."""
