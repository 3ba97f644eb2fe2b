"""The fault suite: faults, hostile input, the read-only guarantee, nothing lost.

One module per fault of the issue, each case checking (a) a typed error or a
clean skip, (b) no partition file changed or torn, (c) nothing captured lost,
(d) the next run after the fault heals succeeds (see ``helpers``):

- ``test_01_read_only``    Hermes's files untouched (checksums, strace); a store in a
                           read-only folder read by an unprivileged user
- ``test_02_locks``        WAL writer mid-transaction; BEGIN EXCLUSIVE on a rollback
                           journal; a hot journal
- ``test_03_corruption``   garbage header, truncated file, zeroed pages
- ``test_04_replacement``  restored backup, fresh empty store
- ``test_05_schema_drift`` oldest schema, newer columns, no session_model_usage, not Hermes
- ``test_06_hostile_cells`` every hostile cell and .hypignore of the issue in one store
- ``test_07_crash``        kill -9 at every write point, and of the dagster CLI
- ``test_08_disk_full``    a 1 MiB tmpfs under the warehouse
- ``test_09_concurrency``  a sensor run and a backfill of the same day at once
- ``test_10_privacy``      ignored data never on disk; purge removes a scope everywhere

Tools: ``helpers`` (installation, outcomes, the four checks), ``forking`` (forked
children: unprivileged, or killed at a point), ``hermes_process`` (a Hermes holding
the store in a given state), ``run_script`` (runs and ticks in a fresh process).
"""
