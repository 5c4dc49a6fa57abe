"""What outbox does beyond queueing and sending, a package each: routes and throttles,
suppression, bounces, webhooks, mailings, DKIM keys, SMTP submission, retention.
"""
