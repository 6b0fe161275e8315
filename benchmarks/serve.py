"""Per-statement latency through ``dpsql serve`` (psycopg over loopback) beside the same statements
in-process, and throughput under load — 16, 64 and 128 concurrent clients: statements per second,
latency p50/p99 and the server's memory (RSS) — on the demo's census table.

Both paths run the same statements with the same costs in one run, alternating: a GROUP BY, a
filtered cross tabulation, a CUBE and a range-filtered count, each with a parameter that changes
from repetition to repetition so every statement is measured afresh (none is answered from kept
measurements). The server path is a psycopg connection using the extended protocol (Parse/Bind/
Describe/Execute with a bound parameter), so it includes the server's Describe (the pipeline's prepare)
the first time a statement text is seen ("first_*" columns). "wire" is the median of the paired
differences: what the protocol, the thread hand-off and the server's own handling add to a statement;
"round trip" times a statement the server answers itself (the protocol alone). Throughput: 16 clients (psycopg connections,
one thread each) against the server, beside 16 threads each with its own in-process connection. Load:
16, 64 and 128 clients (each a psycopg connection on a thread of its own, connected before the clock
starts) each send fresh small statements (the four above in turn, a new parameter each time), one
after the other; the table gives statements per second over the whole run, each statement's latency
(p50, p99) and the server process's resident memory after the run (and its peak). The server runs in
its own process, as deployed. Machine load matters (2 cores shared): note ``uptime`` beside the figures.

    python benchmarks/serve.py [--persons 20000] [--repeats 30] [--statements-per-client 25] [--load-only]

Prints a table and writes benchmarks/results/serve.csv.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import psycopg
import yaml

import dpsql
from dpsql import demo
from dpsql.serve import hash_password
from results_io import print_table, write_csv

STATEMENTS = (  # (name, dpsql text with ?, PostgreSQL text with %s, parameter of repetition i)
    ("GROUP BY sex", "SELECT sex, COUNT(*) AS n FROM census WHERE wave >= ? GROUP BY sex", lambda i: 2019 + i % 4),
    ("sex x race, WHERE age", "SELECT sex, race, COUNT(*) AS n FROM census WHERE age > ? GROUP BY sex, race", lambda i: 20 + i),
    ("CUBE (education, sex)", "SELECT education, sex, COUNT(*) AS n FROM census WHERE age > ? GROUP BY CUBE (education, sex)", lambda i: 20 + i),
    ("COUNT, age range", "SELECT COUNT(*) AS n FROM census WHERE age BETWEEN ? AND 65", lambda i: 18 + i),
)
EPSILON = 0.01
BUDGET = dpsql.Budget(epsilon=1e6, delta=1e-6)
PASSWORD = "benchmark"


@contextmanager
def served(columns: dict[str, object]) -> Iterator[tuple[str, int, int]]:
    """``dpsql serve`` in its own process (as deployed: no interpreter shared with the clients) on the
    same table, written to Parquet, its ledger a file (charges fsynced as deployed); yields (host, port, pid)."""
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        pd.DataFrame(columns).to_parquet(folder / "census.parquet")
        (folder / "census.yaml").write_text(yaml.safe_dump(demo.DEMO_SCHEMA))
        budget = {"epsilon": BUDGET.epsilon, "delta": BUDGET.delta}
        analyst = {"password": hash_password(PASSWORD), "budget": budget, "default_epsilon": EPSILON}
        config = {"tables": {"census": {"source": "census.parquet", "schema": "census.yaml"}}, "ledgers": "ledgers",
                  "analysts": {"bench": analyst}, "workers": 8,
                  "limits": {"connections": 200, "statements_per_analyst": 8, "statement_seconds": 120}}
        (folder / "server.yaml").write_text(yaml.safe_dump(config))
        process = subprocess.Popen(
            [sys.executable, "-m", "dpsql.cli", "serve", "--config", str(folder / "server.yaml"), "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            banner = process.stdout.readline()  # type: ignore[union-attr]
            match = re.search(r"on ([\d.]+):(\d+)", banner)
            if match is None:
                raise RuntimeError(f"the server did not start: {banner!r}")
            yield match.group(1), int(match.group(2)), process.pid
        finally:
            process.terminate()
            process.wait(timeout=60)


def in_process(columns: dict[str, object]) -> dpsql.Connection:
    connection = dpsql.connect(budget=BUDGET, default_epsilon=EPSILON)
    connection.register("census", columns, schema=demo.DEMO_SCHEMA)
    return connection


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def latency_rows(columns: dict[str, object], host: str, port: int, repeats: int) -> list[dict[str, object]]:
    local = in_process(columns).cursor()
    remote = psycopg.connect(f"host={host} port={port} user=bench password={PASSWORD} dbname=dpsql", autocommit=True)
    rows = []
    for name, sql, parameter in STATEMENTS:
        wire_sql = sql.replace("?", "%s")
        cold_local = timed(lambda: local.execute(sql, (parameter(0),)).fetchall())
        cold_remote = timed(lambda: remote.execute(wire_sql, (parameter(0),)).fetchall())
        in_proc, served = [], []
        for i in range(1, repeats + 1):  # alternating, so both see the same machine load
            in_proc.append(timed(lambda: local.execute(sql, (parameter(i),)).fetchall()))
            served.append(timed(lambda: remote.execute(wire_sql, (parameter(i),)).fetchall()))
        differences = [b - a for a, b in zip(in_proc, served)]
        rows.append({
            "statement": name, "in_process_ms": statistics.median(in_proc), "served_ms": statistics.median(served),
            "wire_ms": statistics.median(differences), "wire_p90_ms": sorted(differences)[int(0.9 * len(differences))],
            "first_in_process_ms": cold_local, "first_served_ms": cold_remote,
        })
    round_trip = [timed(lambda: remote.execute("SHOW dpsql.epsilon").fetchall()) for _ in range(repeats)]
    rows.append({"statement": "round trip (SHOW dpsql.epsilon)", "in_process_ms": "", "served_ms": statistics.median(round_trip),
                 "wire_ms": statistics.median(round_trip), "wire_p90_ms": sorted(round_trip)[int(0.9 * len(round_trip))],
                 "first_in_process_ms": "", "first_served_ms": ""})
    remote.close()
    return rows


def timed_clients(runners: list[Callable[[str, tuple], object]], per_client: int, first: int = 0) -> tuple[float, list[float], list[str]]:
    """Each runner on a thread of its own runs ``per_client`` fresh statements (the four above in turn, a
    new parameter each), all starting together: the wall time, each statement's latency, and the
    SQLSTATEs of the statements that failed."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(runners) + 1)

    def work(run: Callable[[str, tuple], object], offset: int) -> None:
        barrier.wait()
        for i in range(per_client):
            name, sql, parameter = STATEMENTS[(offset + i) % len(STATEMENTS)]
            started = time.perf_counter()
            try:
                run(sql, (parameter(first + offset * per_client + i),))
            except psycopg.Error as error:
                with lock:
                    failures.append(str(error.sqlstate))
            with lock:
                latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=work, args=(run, n)) for n, run in enumerate(runners)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies, failures


def throughput(clients: int, per_client: int, open_client: Callable[[], Callable[[str, tuple], object]]) -> float:
    """Statements per second when ``clients`` threads each run ``per_client`` statements."""
    elapsed, _, _ = timed_clients([open_client() for _ in range(clients)], per_client)
    return clients * per_client / elapsed


LOAD_LEVELS = ((16, 20), (64, 8), (128, 5))  # (clients, statements per client)


def rss_mib(pid: int) -> tuple[float, float]:
    """The process's resident memory now and at its peak, MiB (Linux /proc)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def load_rows(host: str, port: int, pid: int) -> list[dict[str, object]]:
    rows = []
    for clients, per_client in LOAD_LEVELS:
        connections = [psycopg.connect(f"host={host} port={port} user=bench password={PASSWORD} dbname=dpsql", autocommit=True)
                       for _ in range(clients)]
        runners = [lambda sql, parameters, c=c: c.execute(sql.replace("?", "%s"), parameters).fetchall() for c in connections]
        elapsed, latencies, failures = timed_clients(runners, per_client, first=1000)
        for connection in connections:
            connection.close()
        ordered = sorted(latencies)
        rss, peak = rss_mib(pid)
        rows.append({
            "clients": clients, "statements": len(latencies), "failed": len(failures), "statements_per_s": len(latencies) / elapsed,
            "p50_ms": 1000 * ordered[len(ordered) // 2], "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "rss_mib": rss, "peak_rss_mib": peak,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--persons", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--statements-per-client", type=int, default=25)
    parser.add_argument("--load-only", action="store_true", help="only the 16/64/128-client load table")
    arguments = parser.parse_args()
    columns = demo.generate_census(arguments.persons, seed=0)
    print(f"machine load (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    if arguments.load_only:
        with served(columns) as (host, port, pid):
            load = load_rows(host, port, pid)
        print_load(load)
        return
    with served(columns) as (host, port, pid):
        rows = latency_rows(columns, host, port, arguments.repeats)

        def served_client() -> Callable[[str, tuple], object]:
            connection = psycopg.connect(f"host={host} port={port} user=bench password={PASSWORD} dbname=dpsql", autocommit=True)
            return lambda sql, parameters: connection.execute(sql.replace("?", "%s"), parameters).fetchall()

        def local_client() -> Callable[[str, tuple], object]:
            cursor = in_process(columns).cursor()
            return lambda sql, parameters: cursor.execute(sql, parameters).fetchall()

        per_client = arguments.statements_per_client
        for label, opener in (("in-process", local_client), ("served", served_client)):
            for clients in (1, 16):
                rate = throughput(clients, per_client if clients > 1 else 4 * per_client, opener)
                rows.append({"statement": f"throughput, {clients} client(s), {label}", "in_process_ms": "", "served_ms": "",
                             "wire_ms": "", "wire_p90_ms": "", "first_in_process_ms": "", "first_served_ms": "",
                             "statements_per_s": rate})
        load = load_rows(host, port, pid)
    columns_out = ["statement", "in_process_ms", "served_ms", "wire_ms", "wire_p90_ms", "first_in_process_ms", "first_served_ms", "statements_per_s"]
    for row in rows:
        row.setdefault("statements_per_s", "")
    text = lambda v: f"{v:.1f}" if isinstance(v, float) else ("—" if v == "" else str(v))  # noqa: E731
    print(f"census: {len(columns['person_id']):,} rows, {arguments.persons:,} persons; epsilon = {EPSILON} per statement; "
          f"{arguments.repeats} repetitions per statement (medians, ms)")
    print_table(rows, columns_out, text)
    print(f"wrote {write_csv('serve.csv', rows, columns_out)}")
    print_load(load)


def print_load(load: list[dict[str, object]]) -> None:
    columns = ["clients", "statements", "failed", "statements_per_s", "p50_ms", "p99_ms", "rss_mib", "peak_rss_mib"]
    print(f"\nload: fresh small statements (epsilon = {EPSILON} each), every client on a connection of its own, {os.getloadavg()[0]:.2f} load after")
    print_table(load, columns, lambda v: f"{v:.1f}" if isinstance(v, float) else str(v))
    print(f"wrote {write_csv('serve_load.csv', load, columns)}")


if __name__ == "__main__":
    main()
