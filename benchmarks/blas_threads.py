"""BLAS threads and the LDP design of n = 64 (all prefixes, ε = 1, default options) on a loaded machine.

Each run is a fresh interpreter designing the mechanism while another process keeps one core busy, with
``OPENBLAS_NUM_THREADS`` unset, set to 1 and set to 2, and with the planner's pinning to one BLAS thread
(``planner.threads``) on — what the library does — or switched off in that interpreter (the behaviour
before the pinning). Wall and CPU seconds of the whole design (all threads), one run each.

    OPENBLAS_NUM_THREADS= .venv/bin/python benchmarks/blas_threads.py   # prints the table, writes results/blas_threads.csv
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from results_io import print_table, write_csv

TIMEOUT_SECONDS = 400  # an unpinned run that takes longer is reported as "> 400"
SETTINGS: list[tuple[str, str | None]] = [("unset", None), ("1", "1"), ("2", "2")]

CHILD = """
import contextlib, json, sys, time
import numpy as np
import planner.threads
if sys.argv[1] == "off":
    planner.threads.single_blas_thread = contextlib.nullcontext  # the behaviour before the pinning
from planner.ldp import design
wall, cpu = time.perf_counter(), time.process_time()
mechanism = design(np.tril(np.ones((64, 64))), 1.0, seed=0)
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "outputs": mechanism.num_outputs}))
"""


def run(setting: str | None, pinning: str) -> dict[str, object]:
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if setting is not None:
        environment["OPENBLAS_NUM_THREADS"] = setting
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, pinning], env=environment, capture_output=True,
                              text=True, check=True, timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return {"wall_s": f"> {TIMEOUT_SECONDS}", "cpu_s": "—"}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": round(found["wall_s"], 2), "cpu_s": round(found["cpu_s"], 2)}


def main() -> None:
    loader = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # keeps one core busy
    try:
        rows = [
            {"OPENBLAS_NUM_THREADS": name, "pinning": pinning, **run(setting, pinning)}
            for pinning in ("on", "off") for name, setting in SETTINGS
        ]
    finally:
        loader.terminate()
        loader.wait()
    print(f"LDP design, n = 64, while another process loads a core ({os.cpu_count()} cores); one run each")
    print_table(rows, list(rows[0]))
    write_csv("blas_threads.csv", rows)


if __name__ == "__main__":
    main()
