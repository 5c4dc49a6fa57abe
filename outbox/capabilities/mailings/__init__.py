"""Mailings: one body, stored once, rendered for each of many recipients.

A mailing's recipients are rows of messages (mailing_id, fields, the subject each gets; no
bodies of their own), so claims, retries, per-recipient states, bounces, suppression, webhooks and
the pages treat them as any message. The modules: `stream` (the request read as it
arrives), `head` (the mailing's own fields), `templates` (compiled and rendered), `sandbox`
(Jinja2's, held to a budget of steps, time and size), `recipients`
(checked and stored a chunk at a time), `intake` (create and append, all or none),
`control` (pause, resume, cancel, progress), `render` (a row as a mail at send time),
`purge` (a mailing removed by retention once none of its rows is left),
`unsubscribe` (RFC 8058's one-click link and page).
"""
