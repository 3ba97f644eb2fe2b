"""Drive the project from a fresh process: ranged runs and sensor ticks, in order.

``python -m tests.faults.run_script STEP...`` from the repo root, with the
installation in the environment (``HERMES_HOME``, ``HERMES_ASSETS_WAREHOUSE``,
...). Steps: ``run:START:END`` (one run of every asset over the range, as a
single-run backfill launches it) and ``tick`` (one evaluation of the sensor,
cursor carried from tick to tick). Prints one JSON line per step; exits 1 if a
run fails. Used where a test needs a whole separate process (under strace).
"""

from __future__ import annotations

import json
import os
import sys


def main(steps: list[str]) -> int:
    import dagster as dg

    from hermes_assets.definitions import defs as lazy_defs
    from tests.defs.harness import RANGE_END, RANGE_START
    from tests.sensor.harness import SensorDriver

    defs = lazy_defs()
    instance = dg.DagsterInstance.ephemeral()
    sensor = SensorDriver(os.environ["HERMES_HOME"])
    code = 0
    for step in steps:
        if step.startswith("run:"):
            _, start, end = step.split(":")
            result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
                instance=instance, tags={RANGE_START: start, RANGE_END: end}, raise_on_error=False
            )
            print(json.dumps({"step": step, "success": result.success}), flush=True)
            code |= 0 if result.success else 1
        elif step == "tick":
            tick = sensor.tick()
            print(json.dumps({"step": step, "days": tick.days, "skip": tick.skip}), flush=True)
        else:
            raise SystemExit(f"unknown step {step}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
