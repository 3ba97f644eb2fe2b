"""Run tags: Dagster's own that this project reads, and the one it sets on the sensor's runs."""

#: the run key of a sensor's run (kept by Dagster's retries of it)
RUN_KEY_TAG = "dagster/run_key"
#: on a failed run that Dagster's run retries will run again (dagster.yaml ``run_retries``)
WILL_RETRY_TAG = "dagster/will_retry"
#: on a retry: the run it retries
AUTO_RETRY_RUN_ID_TAG = "dagster/auto_retry_run_id"
#: on every run the sensor requests
TRIGGER_TAG = {"hermes/trigger": "sensor"}
#: on the sensor's runs of partition days no Hermes store holds a session on (captured once, as
#: 0 rows and no file, so that every day reads as captured): such a run expects nothing to capture
NO_SESSIONS_TAG = {"hermes/sessions": "none"}
#: the partition of a run, as Dagster tags it (the sensor sets it itself on the run of a day the
#: loaded partitions lack: defs/partitions.Days.before_first)
PARTITION_TAG = "dagster/partition"
#: Dagster's run queue starts the runs of higher priority first (default 0): the run of the days
#: older than the first partition has -1, so that a restored history (one run, however long)
#: never holds the live days' captures behind it in the queue
PRIORITY_TAG = "dagster/priority"
OLDER_DAY_PRIORITY = "-1"
#: the first and last day of a ranged run (a backfill's single run, the sensor's ranged run)
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
