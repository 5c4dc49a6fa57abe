"""Signed webhooks: endpoints, the deliveries of events to them, and the workers' job.

`endpoints` registers and changes endpoints, `store` writes and reads deliveries (the
emit side and the claim), `post` makes one request to a checked address, `safety`
says which addresses may be asked, `signing` signs per Standard Webhooks, `deliver`
is the workers' job.
"""

from . import commands
from .deliver import run_due, schedule, warn_unsafe
from .store import purge_old

__all__ = ["commands", "purge_old", "run_due", "schedule", "warn_unsafe"]
