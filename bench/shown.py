"""How long the message page's HTML filter takes on crafted bodies, by their size.

    .venv/bin/python bench/shown.py                 # 12, 24, 48 KiB, 1 and 5 MiB
    .venv/bin/python bench/shown.py --kib 48 96     # other sizes

Each body repeats one unit crafted against a scan that restarts at every unfinished
token ("src=a ", "<img src=a ", "url(//", ...). The filter is what the page and its
frame run (web.shown.loads_remote, then without_remote and with_inline): it prints the
thread's CPU seconds for each unit and size; a linear cost grows as the size does. The
page itself shows at most web.shown.SHOWN_HTML_CHARS (1 MiB). No database or server.
"""

import argparse
import time

from outbox.web.shown import loads_remote, with_inline, without_remote

UNITS = ["src=a ", "<img src=a ", "<img src=//a ", "url(//", "<a x='", "<!--", "<p style='url( "]


def seconds(body: str) -> float:
    """CPU seconds of this thread for the page's filter on body."""
    started = time.thread_time()
    loads_remote(body)
    with_inline(without_remote(body), {"logo": "data:,"})
    return time.thread_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kib", type=int, nargs="+", default=[12, 24, 48, 1024, 5120])
    sizes = parser.parse_args().kib
    print("unit".ljust(18) + "".join(f"{kib:>10} KiB" for kib in sizes))
    for unit in UNITS:
        taken = [seconds(unit * (kib * 1024 // len(unit))) for kib in sizes]
        print(repr(unit).ljust(18) + "".join(f"{s:>12.3f} s" for s in taken))


if __name__ == "__main__":
    main()
