"""The Dagster entry point: everything lives in :mod:`hermes_assets.defs`.

The settings are validated first (SPEC §10): a bad value stops the load with
one line naming the variable, before any definition is built.
"""

from pathlib import Path

import dagster as dg

from hermes_assets.defs import run_log, settings
from hermes_assets.lib import logs


@dg.definitions
def defs() -> dg.Definitions:
    logs.configure(settings.load().log_format)
    run_log.quiet_dagster_warnings()
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent / "defs")
