"""The Dagster entry point: the one place where the definitions are built.

Importing any module of ``hermes_assets`` does nothing but define things: it
reads no setting, file or store, configures no logging and touches no hook or
filter (``tests/docs/test_import_purity.py`` holds that). :func:`defs`, which
Dagster calls each time it loads the definitions (a code server's start,
*Reload definitions*, each run worker), does all of it, in one lifetime:

1. reads and checks the settings (SPEC §10): a bad value, or a warehouse this
   user cannot write, stops the load with one line naming the variable, before
   any definition is built (``defs/console.py`` says how that line reaches the
   console or the UI); so does any other setting a builder finds it cannot
   honour (an executor whose package is not installed);
2. configures logging, and the console of a command a person typed, and has
   Python's full collections leave the process's imported objects alone, from
   the first load on and at its exit (``defs/process_exit.py``), and Arrow take
   its memory from the system allocator (``defs/arrow_memory.py``);
3. finds where the history starts and builds the daily partitions from it
   (``defs/partitions.py``);
4. builds the assets, checks, sensors, resources and executor on those
   partitions and settings, and adds the definitions of each module of yours
   under ``defs/`` that defines ``definitions(days)`` (``docs/building.md``).
"""

import functools
import importlib
import pkgutil
import warnings

import dagster as dg

import hermes_assets.defs
from hermes_assets.defs import (
    analytics_assets,
    arrow_memory,
    capture_assets,
    console,
    executor,
    exposures_asset,
    io_manager,
    jobs,
    partitions,
    process_exit,
    resources,
    run_log,
    sensors,
    settings,
    store_checks,
)
from hermes_assets.lib.basics import logs


@dg.definitions
def defs() -> dg.Definitions:
    loaded = console.checked_settings()
    logs.configure(loaded.log_format, level=loaded.log_level)
    console.refuse_host_conflicts(loaded)
    run_log.install()
    process_exit.freeze_imported()
    process_exit.skip_final_collection()
    arrow_memory.use_system_allocator()
    console.quiet_dagster_warnings()
    try:
        days = partitions.build(loaded)
        console.explain_partition_errors(days)
        return _built(loaded, days)
    except Exception as exc:
        bad = console.setting_error(exc)
        if bad is None or isinstance(bad, console.BadSetting):
            raise
        console.stop(bad)


@functools.lru_cache(maxsize=1)
def _built(loaded: settings.Settings, days: partitions.Days) -> dg.Definitions:
    """:func:`_build`'s definitions, built once for the same settings and partitions: one command
    (``dg launch``, ``dagster asset materialize``) has Dagster load the definitions six times in
    its one process, each time reading the settings and the history's start again, as any load
    does; the definitions they are built from are the same, and so is what Dagster then makes of
    them (their repository, the run's job). Any other setting or first day builds them anew."""
    return _build(loaded, days)


def _build(loaded: settings.Settings, days: partitions.Days) -> dg.Definitions:
    """The definitions on the settings ``loaded`` and the partitions ``days``.

    Dagster warns that some parameters used here are in beta or preview (a check's partitions, a
    backfill policy): the project chose them and its tests pin them, so the warnings, which a
    user can do nothing about, are silenced while the definitions are built, and only then."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        project = dg.Definitions(
            assets=[
                store_checks.STATE,
                capture_assets.capture_asset(days),
                analytics_assets.analytics_assets(days),
                exposures_asset.exposures_asset(),
            ],
            asset_checks=[store_checks.state_checks(days)],
            sensors=sensors.build(loaded, days),
            jobs=[jobs.purge_job, jobs.relabel_job],
            resources={**resources.resources_for(loaded), **io_manager.io_managers(loaded)},
            executor=executor.executor_for(loaded.executor),
        )
        return dg.Definitions.merge(project, *yours(days))


#: the hook a module of yours under ``defs/`` defines: ``definitions(days: Days) -> dg.Definitions``
HOOK = "definitions"


def yours(days: partitions.Days) -> list[dg.Definitions]:
    """The definitions of your own modules under ``defs/``: each module there that defines
    :data:`HOOK` is imported and called with the partitions (the project's modules define none)."""
    found = []
    for info in sorted(pkgutil.iter_modules(hermes_assets.defs.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"hermes_assets.defs.{info.name}")
        hook = getattr(module, HOOK, None)
        if callable(hook):
            found.append(hook(days))
    return found
