"""Bounces: VERP return paths, the two ways bounce mails come in, reading them.

verp: the return path per recipient. parse: what a bounce mail says. store: keeping the
raw mail, then matching it to its message and marking the recipient. inbound: the SMTP
server of `outbox bounces --listen`. imap: the workers' poll of a bounce mailbox.
"""
