"""An example of each request and answer body of the OpenAPI document, by schema name."""

from typing import Any

from outbox.api.openapi.parts import Schema

SENT_AT = "2026-01-15T09:30:02Z"
_MESSAGE: dict[str, Any] = {
    "id": 42, "message_id": "<20260115093000.42.a1b2c3@mail.example.com>", "status": "sent",
    "from": "Shop <shop@example.com>", "to": ["Ann Lee <ann@example.org>"], "cc": [], "bcc": [],
    "reply_to": None, "subject": "Your order 1234", "priority": 0, "stream": "transactional",
    "attempts": 1,
    "max_attempts": 8, "created_at": "2026-01-15T09:30:00Z", "send_after": None,
    "next_attempt_at": None, "last_retry": None, "last_error": None, "sent_at": SENT_AT,
    "recipients": [{"kind": "to", "address": "ann@example.org", "name": "Ann Lee",
                    "state": "sent", "code": None, "reply": None, "attempts": 1}],
    "partly_delivered": False, "mailing_id": None, "metadata": {"order": "1234"},
}  # fmt: skip
_NEW_MESSAGE = {
    "to": ["ann@example.org"], "from": "shop@example.com",
    "subject": "Your order 1234", "text": "It ships today.", "metadata": {"order": "1234"},
}  # fmt: skip
_FORM = {"to": ["ann@example.org"], "subject": "Your order 1234", "text": "It ships today."}
_ENDPOINT = {
    "id": 3, "url": "https://app.example.com/hooks/outbox", "events": ["message.sent"],
    "enabled": True, "disabled_at": None, "disabled_reason": None,
    "created_at": "2026-01-10T08:00:00Z", "created_by": "api:deploy",
}  # fmt: skip
_SUPPRESSION = {
    "id": 7, "address": "gone@example.org", "key": "gone@example.org", "reason": "asked us to stop",
    "source": "manual", "created_at": "2026-01-12T10:00:00Z", "expires_at": None,
    "created_by": "api:support", "message_pk": None, "bounce_pk": None, "live": True,
}  # fmt: skip
_MAILING = {
    "id": 5, "state": "open", "from": "News <news@example.com>", "subject": "January news",
    "recipients": 2, "attachments": 0, "priority": 0, "send_after": None,
    "created_at": "2026-01-15T07:00:00Z",
    "progress": {"queued": 1, "sending": 0, "sent": 1, "deferred": 0, "failed": 0,
                 "bounced": 0, "cancelled": 0},
}  # fmt: skip
_NEW_RECIPIENTS = [
    {"email": "ann@example.org", "name": "Ann Lee", "fields": {"plan": "pro"}},
    {"email": "bo@example.net"},
]

EXAMPLES: dict[str, Any] = {
    "NewMessage": _NEW_MESSAGE,
    "NewMessageForm": _FORM,
    "NewMessageUpload": _FORM,  # its files are parts of their own, not in an example
    "NewBatch": {"messages": [_NEW_MESSAGE, {**_NEW_MESSAGE, "to": ["bo@example.net"]}]},
    "Message": _MESSAGE,
    "MessageDetail": {
        **_MESSAGE,
        "attachments": [
            {
                "filename": "invoice.pdf",
                "content_type": "application/pdf",
                "size": 48213,
                "content_id": None,
            }
        ],
        "attempt_log": [
            {
                "started_at": "2026-01-15T09:30:01Z",
                "finished_at": SENT_AT,
                "outcome": "sent",
                "smtp_code": 250,
                "error": None,
                "reply": "2.0.0 Ok: queued as 4Xk2",
                "route": None,
            }
        ],
        "queued_to_sent_ms": 2000,
    },  # fmt: skip
    "Moved": {
        **_MESSAGE,
        "status": "queued",
        "sent_at": None,
        "note": None,
        "next_attempt_at": "2026-01-15T09:31:00Z",
    },  # fmt: skip
    "MessagePage": {"messages": [_MESSAGE], "next": "/api/messages?before=42"},
    "Batch": {
        "messages": [
            {"id": 43, "message_id": "<43.d4e5@mail.example.com>"},
            {"id": 44, "message_id": "<44.f6a7@mail.example.com>"},
        ]
    },  # fmt: skip
    "Error": {"error": "no message 41"},
    "Forbidden": {"error": "this token lacks the 'manage' scope", "scope": "manage"},
    "BadRequest": {
        "error": "the message was not queued",
        "errors": {"body": "must be a JSON object"},
    },  # fmt: skip
    "BadFields": {
        "error": "the message was not queued",
        "errors": {"to": "'ann@' is not an email address"},
    },  # fmt: skip
    "TooLarge": {"error": "the message is 11000000 bytes, over the limit", "limit": 10485760},
    "Unsupported": {
        "error": "Content-Type text/plain is not accepted: this takes application/json",
        "accepted": ["application/json"],
    },
    "KeyReused": {"error": "this Idempotency-Key was used for a different message", "id": 42},
    "MoveRefused": {"error": "a sent message cannot be cancelled", "status": "sent"},
    "BatchRefused": {
        "error": "no message of the batch was queued",
        "errors": [{"index": 1, "field": "to", "error": "at least one recipient is required"}],
    },  # fmt: skip
    "Suppression": _SUPPRESSION,
    "NewSuppression": {
        "address": "gone@example.org",
        "reason": "asked us to stop",
        "expires_at": "2027-01-01T00:00:00Z",
    },  # fmt: skip
    "SuppressionPage": {"suppressions": [_SUPPRESSION], "next": None},
    "WebhookEndpoint": _ENDPOINT,
    "NewWebhookEndpoint": {
        "url": "https://app.example.com/hooks/outbox",
        "events": ["message.sent"],
    },  # fmt: skip
    "WebhookEndpointMade": {**_ENDPOINT, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
    "WebhookEndpoints": {"webhooks": [_ENDPOINT]},
    "WebhookDeliveryPage": {
        "deliveries": [
            {
                "id": 90,
                "event_id": "msg_2b7ZbKx",
                "type": "message.sent",
                "status": "delivered",
                "attempts": 1,
                "next_attempt_at": "2026-01-15T09:30:03Z",
                "last_attempt_at": "2026-01-15T09:30:03Z",
                "response_code": 200,
                "latency_ms": 41,
                "response": "ok",
                "error": None,
                "created_at": "2026-01-15T09:30:02Z",
                "payload": {"type": "message.sent", "data": {"id": 42}},
            }
        ],
        "next": None,
    },  # fmt: skip
    "NewMailing": {
        "from": "News <news@example.com>",
        "subject": "January news",
        "text": "Hello {{ name }}, ...",
        "recipients": _NEW_RECIPIENTS,
    },  # fmt: skip
    "NewRecipients": {"recipients": _NEW_RECIPIENTS},
    "MailingCreated": {"id": 5, "recipients": 2, "state": "open"},
    "RecipientsAdded": {"id": 5, "added": 2, "recipients": 4},
    "Mailing": _MAILING,
    "MailingMoved": {**_MAILING, "state": "paused", "moved": 1},
    "MailingRefused": {
        "error": "the mailing is cancelled, not open or paused",
        "state": "cancelled",
    },
    "DomainReport": {
        "checked_at": "2026-01-15T09:30:00Z",
        "verdict": "problem",
        "notes": ["PTR is not checked: the routes file names no source address outbox sends from"],
        "domains": [
            {
                "domain": "example.com",
                "roles": ["dkim", "from"],
                "verdict": "problem",
                "checks": [
                    {
                        "name": "SPF",
                        "verdict": "ok",
                        "found": "v=spf1 ip4:203.0.113.5 -all",
                        "publish": None,
                        "why": "parses, 0 look-ups of 10; authorises 1 route address",
                    },
                    {
                        "name": "DMARC",
                        "verdict": "problem",
                        "found": "v=DMARC1; p=reject",
                        "publish": None,
                        "why": "p=reject at _dmarc.example.com; no DKIM signature",
                    },
                ],
            }
        ],
    },  # fmt: skip
}
DOCUMENT = {"openapi": "3.1.0", "info": {"title": "outbox", "version": "1.0"}, "paths": {}}


def exemplify(paths: dict[str, Schema]) -> None:
    """Give each body of paths that has none the example of its schema, by the schema's name."""
    for operation in (op for item in paths.values() for op in item.values()):
        bodies = [operation.get("requestBody", {})]
        bodies += operation["responses"].values()
        for media in (m for body in bodies for m in body.get("content", {}).values()):
            name = media["schema"].get("$ref", "").rpartition("/")[2]
            if "example" not in media and name in EXAMPLES:
                media["example"] = EXAMPLES[name]
