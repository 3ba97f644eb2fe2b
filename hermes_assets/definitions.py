"""The Dagster entry point: everything lives in :mod:`hermes_assets.defs`.

The settings are read here, once per load of the definitions, and checked
first (SPEC §10): a bad value, or a warehouse this user cannot write, stops
the load with one line naming the variable, before any definition is built
(``defs/console.py`` says how that line reaches the console or the UI). So
does any other setting a definitions module finds it cannot honour (an
executor whose package is not installed). The definitions modules then take
their values from these settings (``settings.in_use()``).
"""

from pathlib import Path

import dagster as dg

from hermes_assets.defs import console, run_log, settings
from hermes_assets.lib import logs


@dg.definitions
def defs() -> dg.Definitions:
    loaded = settings.use(console.checked_settings())
    logs.configure(loaded.log_format, level=loaded.log_level)
    run_log.install()
    console.quiet_dagster_warnings()
    console.explain_partition_errors()
    try:
        return dg.load_from_defs_folder(path_within_project=Path(__file__).parent / "defs")
    except Exception as exc:
        bad = console.setting_error(exc)
        if bad is None or isinstance(bad, console.BadSetting):
            raise
        console.stop(bad)
