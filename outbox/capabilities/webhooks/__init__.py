"""Signed webhooks: endpoints, the deliveries of events to them, and the workers' job.

`endpoints` registers and changes endpoints, `store` writes and reads deliveries (the
emit side and the claim), `post` makes one request to a checked address, `safety`
says which addresses may be asked, `signing` signs per Standard Webhooks, `deliver`
is the workers' job, and `events` what happened, told to the endpoints.
"""

from outbox.capabilities.webhooks.deliver import run_due, schedule, warn_unsafe
from outbox.capabilities.webhooks.store import purge_old

__all__ = ["purge_old", "run_due", "schedule", "warn_unsafe"]
