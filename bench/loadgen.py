"""The load of bench/enqueue.py: prepared request bodies posted over keep-alive connections,
by wrk (C) or by Python client processes, timed with the CPU time of each party."""

import http.client
import json
import multiprocessing
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import wrk
from drain import cpu_seconds


@dataclass
class Share:
    """What one client process sends: its request bodies and how many messages each holds."""

    path: str
    bodies: list[bytes]
    per_request: int


@dataclass
class Outcome:
    """What one client process saw."""

    latencies: list[float] = field(default_factory=list)  # seconds, per request
    statuses: Counter[int] = field(default_factory=Counter)
    ids: list[int] = field(default_factory=list)  # acknowledged message ids
    failures: Counter[str] = field(default_factory=Counter)  # connection errors
    cpu: float = 0.0  # seconds of the client processes' own user and system time
    latency_ms: dict[str, float] = field(default_factory=dict)  # wrk's p50, p99 and max


def client(port: int, token: str, share: Share, start: multiprocessing.Event, out) -> None:  # type: ignore[no-untyped-def]
    """Post every body of the share over one keep-alive connection, in turn."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    outcome = Outcome()
    start.wait()
    began_cpu = sum(os.times()[:2])
    for body in share.bodies:
        began = time.perf_counter()
        try:
            conn.request("POST", share.path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            outcome.failures[type(exc).__name__] += 1
            conn.close()
            continue
        outcome.latencies.append(time.perf_counter() - began)
        outcome.statuses[response.status] += 1
        if response.status == 201:
            answer = json.loads(data)
            outcome.ids.extend([m["id"] for m in answer["messages"]] if share.per_request > 1
                               else [answer["id"]])  # fmt: skip
    conn.close()
    outcome.cpu = sum(os.times()[:2]) - began_cpu
    out.send(outcome)
    out.close()


@dataclass
class Run:
    name: str
    seconds: float
    requests: int
    messages: int
    outcome: Outcome
    cpu: dict[str, float] = field(default_factory=dict)  # seconds per party


def drive(name: str, port: int, token: str, parts: list[Share], server: list[int],
          database: int | None) -> Run:  # fmt: skip
    """Run one client process per share, started together; gather what they saw.

    server lists the HTTP server's processes, whose CPU time is taken with the database's.
    """
    context = multiprocessing.get_context("fork")
    start = context.Event()
    pipes, procs = [], []
    for share in parts:
        mine, theirs = context.Pipe(duplex=False)
        proc = context.Process(target=client, args=(port, token, share, start, theirs))
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    time.sleep(0.5)  # let every client connect its socket code and wait at the start
    before = cpu_now(server, database)
    began = time.perf_counter()
    start.set()
    total = Outcome()
    for pipe in pipes:
        part: Outcome = pipe.recv()
        total.latencies += part.latencies
        total.statuses += part.statuses
        total.ids += part.ids
        total.failures += part.failures
        total.cpu += part.cpu
    seconds = time.perf_counter() - began
    after = cpu_now(server, database)
    for proc in procs:
        proc.join()
    requests = sum(len(s.bodies) for s in parts)
    cpu = {party: after[party] - before[party] for party in after}
    cpu["clients"] = total.cpu
    return Run(name, seconds, requests, requests * parts[0].per_request, total, cpu)


def drive_wrk(name: str, port: int, token: str, parts: list[Share], server: list[int],
              database: int | None, binary: Path) -> Run:  # fmt: skip
    """The same with wrk: a thread and a connection per share, all in one C process."""
    headers = [f"Authorization: Bearer {token}", "Content-Type: application/json"]
    url, path = f"http://127.0.0.1:{port}{parts[0].path}", parts[0].path
    before = cpu_now(server, database)
    seen = wrk.run(binary, url, path, headers, [share.bodies for share in parts])
    after = cpu_now(server, database)
    outcome = Outcome(statuses=seen.statuses, ids=seen.ids, latency_ms=seen.latency_ms)
    if seen.errors:
        outcome.failures["no answer"] = seen.errors
    requests = sum(len(s.bodies) for s in parts)
    cpu = {party: after[party] - before[party] for party in after}
    cpu["clients"] = seen.cpu
    return Run(name, seen.seconds, requests, requests * parts[0].per_request, outcome, cpu)


def cpu_now(server: list[int], database: int | None) -> dict[str, float]:
    """CPU seconds used so far by the server's processes and by the database server.

    The database server's figure counts every client it has, other benchmarks' too.
    """
    found = {"server": sum(cpu_seconds(pid) for pid in server)}
    if database is not None:
        found["database"] = cpu_seconds(database)
    return found
