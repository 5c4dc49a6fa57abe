"""Peak memory of one `outbox send-queued` sending mails with 20 MB of attachments, by hand.

    .venv/bin/python bench/memory.py                 # both cases, MariaDB
    .venv/bin/python bench/memory.py --memray        # and where the bytes at the peak come from

Each case refills the bench database named in --url with queued messages carrying 20 MiB
of attachments each, drains them with one worker into smtp-sink and prints the worker's
peak RSS against the goal, and the time. With --memray the worker runs under memray and
the allocations alive at its peak are listed by the line that made them. See
bench/README.md.
"""

import argparse
import multiprocessing
import resource
import sys
import tempfile
from pathlib import Path

import dataset
import drain
import smtpsink

MIB = 1024 * 1024
DEFAULT_URL = "mysql+pymysql://root@127.0.0.1:3306/outbox_bench_memory?charset=utf8mb4"
# name: (messages, attachment sizes of each message)
CASES = {
    "20x20MB": (20, [20 * MIB]),
    "10x2x10MB": (10, [10 * MIB, 10 * MIB]),
}
MEMRAY = Path(sys.executable).parent / "memray"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="bench database (dropped and refilled)")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: all")
    parser.add_argument("--goal-mb", type=float, default=200.0, help="peak RSS goal in MiB")
    parser.add_argument("--memray", action="store_true", help="list the allocations at the peak")
    parser.add_argument("--top", type=int, default=12, help="allocation sites to list")
    return parser.parse_args(argv)


def _where(stack: list[tuple[str, str, int]], depth: int = 3) -> str:
    """The innermost frames of an allocation, innermost first."""
    return " <- ".join(f"{fn} ({Path(file).name}:{line})" for fn, file, line in stack[:depth])


def at_peak(capture: Path, top: int) -> str:
    """The allocations alive at the high-water mark of a memray capture, biggest first."""
    from memray import FileReader

    reader = FileReader(str(capture))
    records = sorted(
        reader.get_high_watermark_allocation_records(merge_threads=True),
        key=lambda record: -record.size,
    )
    held = sum(record.size for record in records)
    lines = [f"memray: peak heap {reader.metadata.peak_memory / MIB:.1f} MiB, "
             f"{held / MIB:.1f} MiB in {len(records)} allocation sites"]  # fmt: skip
    for record in records[:top]:
        stack = record.stack_trace(8) or record.hybrid_stack_trace(8)
        lines.append(f"  {record.size / MIB:7.1f} MiB in {record.n_allocations:>5} allocations  "
                     f"{_where(stack)}")  # fmt: skip
    return "\n".join(lines)


def run_case(args: argparse.Namespace, name: str) -> bool:
    """Fill, drain with one worker, print peak RSS and time; True within the goal."""
    count, sizes = CASES[name]
    print(f"\n{name}: {count} messages, attachments of {[s // MIB for s in sizes]} MiB each")
    # Filled in a process of its own: a worker is started with vfork, and the kernel
    # counts the starting process's peak RSS into the worker's (ru_maxrss), so a
    # bench process that had held the attachments would set a floor under each figure.
    filler = multiprocessing.get_context("spawn").Process(
        target=drain.prepare, args=(args.url, count, sizes)
    )
    filler.start()
    filler.join()
    if filler.exitcode != 0:
        print(f"  filling failed: exit {filler.exitcode}")
        return False
    app = dataset.make_app(args.url)
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    folder = Path(tempfile.mkdtemp(prefix="outbox-memory-"))
    capture = folder / "worker.memray"
    with smtpsink.Sink(record=False) as sink:
        env = drain.worker_env(args.url, sink.host, sink.port, folder, {})
        if args.memray:
            argv = [str(MEMRAY), "run", "--quiet", "--output", str(capture),
                    "-m", "outbox", "send-queued"]  # fmt: skip
        else:
            argv = drain.WORKER
        elapsed, (run,) = drain.drain(1, env, folder, None, argv)
        received = sink.received()
    tally = run.tally()
    peak = run.peak_kib / 1024
    verdict = "PASS" if peak <= args.goal_mb else "FAIL"
    under = " (under memray)" if args.memray else ""
    print(f"  peak RSS {peak:.0f} MiB{under}, goal {args.goal_mb:.0f} MiB: {verdict} "
          f"(this bench process peaked at {floor:.0f} MiB before starting it)")  # fmt: skip
    said = "sent {}, deferred {}, failed {}".format(*tally) if tally else "no tally line"
    print(f"  {elapsed:.1f} s; exit {run.code}; {said}; the sink counted {received}")
    problems, _ = drain.database_check(app, count)
    for problem in problems:
        print(f"  PROBLEM: {problem}")
    if run.code != 0:
        print(f"  stderr ends: {drain.last_line(run.stderr)}")
    if args.memray and capture.exists():
        print(at_peak(capture, args.top))
    return verdict == "PASS" and not problems and run.code == 0


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    with drain.exclusive(args.url):
        results = [run_case(args, name) for name in args.case or CASES]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
