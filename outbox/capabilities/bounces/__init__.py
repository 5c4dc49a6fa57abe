"""Bounces and complaints: VERP return paths, the two ways they come in, reading them.

verp: the return path per recipient. parse: what a bounce mail says; feedback: what a
complaint (an ARF feedback report) says. store: keeping the raw mail, then matching it to
its message and marking the recipient. inbound: the SMTP server of `outbox bounces
--listen`. imap: the workers' poll of a bounce mailbox.
"""
