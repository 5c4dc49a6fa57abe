"""How long a message took from queued to the SMTP server's 250: the figure, in words,
and the quantiles of many."""

import math
from collections.abc import Sequence
from datetime import datetime


def queue_to_sent(created_at: datetime | None, sent_at: datetime | None) -> float | None:
    """Seconds from storing a message to the server taking it; None until it is sent."""
    if created_at is None or sent_at is None:
        return None
    return max((sent_at - created_at).total_seconds(), 0.0)


def in_ms(seconds: float | None) -> int | None:
    """Seconds as whole milliseconds, as the API gives them."""
    return None if seconds is None else round(seconds * 1000)


def in_words(seconds: float) -> str:
    """A duration the way people say it: "180 ms", "4.2 s", "38 s", "3 min", "2 h 5 min"."""
    # Each bound is where the next unit's rounding would begin: 999.6 ms is "1.0 s".
    if seconds < 0.9995:
        return f"{round(seconds * 1000)} ms"
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    if seconds < 59.5:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def rank(count: int, q: float) -> int:
    """Where the q-quantile (0 to 1) of count values sits among them sorted, from 0."""
    return max(math.ceil(q * count) - 1, 0)


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0 to 1) of values by the nearest rank; None for none."""
    if not values:
        return None
    return sorted(values)[rank(len(values), q)]
