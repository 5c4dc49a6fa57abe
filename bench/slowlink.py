"""How fast outbox drains into an SMTP sink 25 ms away (each way), beside bare smtplib, run by hand.

    .venv/bin/python bench/slowlink.py                         # 20,000 mails, 2 processes x 32
    .venv/bin/python bench/slowlink.py --messages 5000 --connections 8 --delay 0.05

The link: `tc netem` delay on a veth pair into a network namespace the bench makes,
when the kernel has netem; otherwise a delay line, a proxy in a process of its own
that holds every byte, in both directions, for --delay seconds before passing it on
(and a new connection for one round trip), in front of postfix's smtp-sink on loopback.
The bench says which it used. Then, in the same run and through the same link: bare
smtplib with the same number of connections (one process each, pre-built mails, as
bench/drain.py's ceiling), and --processes `outbox send-queued` processes with
OUTBOX_MAIL_MAX_CONNECTIONS = connections / processes. Prints both rates and whether
every mail arrived exactly once. See bench/README.md.
"""

import argparse
import asyncio
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import dataset
import drain
import smtpsink

NAMESPACE, OUTSIDE, INSIDE = "outbox-bench", "obb0", "obb1"
OUTSIDE_IP, INSIDE_IP = "10.213.0.1", "10.213.0.2"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=drain.DEFAULT_URL, help="bench database (refilled)")
    parser.add_argument("--messages", type=int, default=20_000, help="queued messages to drain")
    parser.add_argument("--processes", type=int, default=2, help="send-queued processes")
    parser.add_argument("--connections", type=int, default=64, help="in all, over the processes")
    parser.add_argument("--delay", type=float, default=0.025, help="seconds each way")
    parser.add_argument("--ceiling-seconds", type=float, default=10.0, help="bare smtplib run")
    parser.add_argument("--batch", type=int, help="OUTBOX_BATCH_SIZE (default: the app's)")
    parser.add_argument("--no-netem", action="store_true", help="use the delay line")
    return parser.parse_args(argv)


# ---- the delay line


async def _carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Pass what reader gets to writer, each piece delay seconds after it came, in order."""
    loop = asyncio.get_running_loop()
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def take() -> None:
        while data := await reader.read(1 << 16):
            held.put_nowait((loop.time() + delay, data))
        held.put_nowait((loop.time() + delay, b""))

    async def give() -> None:
        while True:
            due, data = await held.get()
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    await asyncio.gather(take(), give())


async def _serve(listen_port: int, upstream: tuple[str, int], delay: float) -> None:
    async def connected(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(2 * delay)  # the handshake's round trip
        server_r, server_w = await asyncio.open_connection(*upstream)
        try:
            await asyncio.gather(
                _carry(client_r, server_w, delay), _carry(server_r, client_w, delay)
            )
        except OSError:
            pass
        finally:
            client_w.close()
            server_w.close()

    server = await asyncio.start_server(connected, "127.0.0.1", listen_port, backlog=1000)
    async with server:
        await server.serve_forever()


def delay_line(upstream: tuple[str, int], delay: float) -> tuple[multiprocessing.Process, int]:
    """A started delay line in front of upstream: its process and its port."""
    port = smtpsink.free_port()
    process = multiprocessing.get_context("fork").Process(
        target=lambda: asyncio.run(_serve(port, upstream, delay)), daemon=True
    )
    process.start()
    smtpsink.wait_for_port("127.0.0.1", port)
    return process, port


# ---- netem


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def netem_link(delay: float) -> str | None:
    """A veth pair into a namespace, delay each way by netem; None if made, else why not."""
    netem_remove()
    try:
        _ip("netns", "add", NAMESPACE)
        _ip("link", "add", OUTSIDE, "type", "veth", "peer", "name", INSIDE)
        _ip("link", "set", INSIDE, "netns", NAMESPACE)
        _ip("addr", "add", f"{OUTSIDE_IP}/30", "dev", OUTSIDE)
        _ip("link", "set", OUTSIDE, "up")
        inside = ["netns", "exec", NAMESPACE, "ip"]
        _ip(*inside, "addr", "add", f"{INSIDE_IP}/30", "dev", INSIDE)
        _ip(*inside, "link", "set", INSIDE, "up")
        _ip(*inside, "link", "set", "lo", "up")
        for where in ([], ["netns", "exec", NAMESPACE]):
            device = INSIDE if where else OUTSIDE
            command = ["tc", "qdisc", "add", "dev", device, "root", "netem", "delay"]
            subprocess.run([*(["ip", *where] if where else []), *command, f"{delay * 1000:g}ms"],
                           check=True, capture_output=True, text=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        netem_remove()
        said = getattr(exc, "stderr", "") or str(exc)
        return said.strip().splitlines()[-1] if said.strip() else str(exc)
    return None


def netem_remove() -> None:
    subprocess.run(["ip", "link", "del", OUTSIDE], capture_output=True)
    subprocess.run(["ip", "netns", "del", NAMESPACE], capture_output=True)


# ---- the run


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    per = max(1, args.connections // args.processes)
    connections = per * args.processes
    print(f"load average {os.getloadavg()[0]:.2f}; {args.messages:,} mails, {args.processes} "
          f"processes x {per} connections, {args.delay * 1000:g} ms each way")  # fmt: skip
    with drain.exclusive(args.url):
        app = drain.prepare(args.url, args.messages, [])
        why = "--no-netem" if args.no_netem else netem_link(args.delay)
        said = "tc netem on a veth pair into a network namespace"
        print(f"link: {said}" if why is None else f"link: a delay line (netem not used: {why})")
        lines: list[multiprocessing.Process] = []
        sinks: list[smtpsink.Sink] = []

        def far_sink() -> tuple[smtpsink.Sink, tuple[str, int]]:
            """A recording sink across the link, and the address to reach it at."""
            if why is None:
                sinks.append(smtpsink.Sink(record=True, host=INSIDE_IP, namespace=NAMESPACE))
                return sinks[-1], (INSIDE_IP, sinks[-1].port)
            sinks.append(smtpsink.Sink(record=True))
            line, port = delay_line((sinks[-1].host, sinks[-1].port), args.delay)
            lines.append(line)
            return sinks[-1], ("127.0.0.1", port)

        try:
            _, bare = far_sink()  # the ceiling's mails go to a sink of their own
            mail = drain.sample_mail([])
            ceiling = drain.ceiling(bare, connections, args.ceiling_seconds, mail)
            print(f"bare smtplib, {connections} connections: {ceiling.rate:,.0f} mails/s",
                  flush=True)  # fmt: skip
            sink, address = far_sink()
            extra = {"OUTBOX_MAIL_MAX_CONNECTIONS": str(per)}
            if args.batch:
                extra["OUTBOX_BATCH_SIZE"] = str(args.batch)
            folder = Path(tempfile.mkdtemp(prefix="outbox-slowlink-"))
            env = drain.worker_env(args.url, address[0], address[1], folder, extra)
            delays = [line.pid for line in lines[1:]]
            watched = [dataset.server_pid(args.url), sink.process.pid, *delays]
            before = [drain.cpu_seconds(pid) for pid in watched]
            elapsed, runs = drain.drain(args.processes, env, folder, None)
            spent = [drain.cpu_seconds(pid) - was for pid, was in zip(watched, before, strict=True)]
            rate = args.messages / elapsed
            print(f"outbox, {args.processes} processes x {per} connections: drained "
                  f"{args.messages:,} in {elapsed:.1f} s: {rate:,.0f} mails/s "
                  f"({rate / ceiling.rate:.1f}x bare smtplib); goal 1,000")  # fmt: skip
            for n, run in enumerate(runs):
                tally = run.tally()
                counts = "sent {}, deferred {}, failed {}".format(*tally) if tally else "no tally"
                print(f"  process {n}: exit {run.code}, {counts}, CPU {run.cpu:.1f} s, "
                      f"peak RSS {run.peak_kib / 1024:.0f} MiB")  # fmt: skip
            names = ("database server", "sink", "delay line")
            said = [f"{name} {seconds:.1f} s" for name, seconds in zip(names, spent, strict=False)]
            print("  CPU meanwhile: " + ", ".join(said))
            ok = drain.verdict(app, args.messages, sink)
        finally:
            for each in sinks:
                each.close()
            for line in lines:
                line.kill()
            if why is None:
                netem_remove()
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
