#!/usr/bin/env python3
"""`pytest tests/defs` several times under CPU load: does anything crash?

Not a test and not run in CI: it reproduces the conditions under which the fork
pool used to die (``Fatal Python error: Segmentation fault`` in a forked worker,
then ``BrokenProcessPool``, in 10 of 10 runs on a 2-core machine at load 1.5-5).
Busy-loop processes (one per core by default) keep the machine loaded while
the suite runs; each run's outcome and duration are printed, and a summary.

    python bench/stress_defs.py                  # 5 runs, one busy process per core
    python bench/stress_defs.py --runs 10 --load 4
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _burn(stop) -> None:
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x ^= i * i


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy-loop processes beside the suite")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=_burn, args=(stop,), daemon=True) for _ in range(args.load)]
    for b in burners:
        b.start()
    results = []
    try:
        for i in range(args.runs):
            t = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "tests/defs", "-q", "-p", "no:cacheprovider"],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            seconds = time.perf_counter() - t
            out = done.stdout + done.stderr
            summary = re.findall(r"^=* ?(\d+ (?:passed|failed).*?) in [\d.]+s", out, re.M)
            crashed = "Segmentation fault" in out or "BrokenProcessPool" in out
            results.append(
                {
                    "run": i + 1,
                    "rc": done.returncode,
                    "seconds": round(seconds, 1),
                    "load": round(os.getloadavg()[0], 2),
                    "summary": summary[-1] if summary else "",
                    "crashed": crashed,
                }
            )
            print(json.dumps(results[-1]), flush=True)
    finally:
        stop.set()
        for b in burners:
            b.join(timeout=5)
    ok = sum(r["rc"] == 0 for r in results)
    print(
        f"\n{ok} of {len(results)} runs passed; crashes: {sum(r['crashed'] for r in results)}; "
        f"{args.load} busy processes on {os.cpu_count()} cores"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
