"""What choosing a message's routes costs a worker, per message, by a table of four rules.

    .venv/bin/python bench/routecost.py                 # 2,000 messages, 3 passes
    .venv/bin/python bench/routecost.py --messages 20000 --passes 5

Each message is a claimed row as the worker reads it: one recipient at an IDNA domain,
sent from a domain the rules name, so every rule's condition is read (the sender's and
the recipients' domains keyed as the suppression list keys them) before the last one
matches nothing and the default route is taken. It prints µs of CPU per message for
each pass and the best; the goal is under 50 µs on one core of this machine. No database
or server.
"""

import argparse
import time
from types import SimpleNamespace

from outbox import smtp
from outbox.capabilities.routes import Route, Rule, Table
from outbox.core.recipients import decode

SETTINGS = smtp.HostSettings("smtp.example.com", 587, 5.0)
ROUTES = {n: Route(n, SETTINGS) for n in ("relay", "backup", "bulk", "local")}
TABLE = Table(
    ROUTES,
    (
        Rule("local", ("relay",), recipient_domain="Bücher.example"),
        Rule("relay", ("backup", "bulk"), sender_domain="SHOP.example", min_priority=5),
        Rule("bulk", sender_domain="news.example"),
        Rule("backup", min_priority=9),
    ),
)


def mail(n: int) -> SimpleNamespace:
    """A claim's mail row: the columns choose() reads."""
    recipients = [{"kind": "to", "address": f"r{n}@example.org"},
                  {"kind": "cc", "address": f"s{n}@bücher.example"}]  # fmt: skip
    return SimpleNamespace(recipients=decode(recipients), from_addr="a@shop.example",
                           priority=0, stream="transactional")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    rows = [mail(n) for n in range(args.messages)]
    each = []
    for number in range(1, args.passes + 1):
        started = time.process_time()
        for row in rows:
            TABLE.choose(row)
        each.append((time.process_time() - started) / len(rows))
        print(f"pass {number}: {each[-1] * 1e6:.1f} µs a message")
    print(f"best: {min(each) * 1e6:.1f} µs a message, {len(rows)} messages")


if __name__ == "__main__":
    main()
