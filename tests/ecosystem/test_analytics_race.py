"""Two hosts finish the same day at the same moment, round after round: the day's one analytics
file is never left missing a host's rows (SPEC §11, several hosts).

Each host is its own process (its own clients to the bucket, its own store written by the
real Hermes writer) capturing the same day of its store, then computing that day's
``hermes_daily_usage`` and ``hermes_daily_tools`` over every host's files. In every round
one host reads its inputs before the other has written its new rows (its figures are
stale), and both put their analytics file at the same instant (a barrier just before the
write: the writes land in the same second, where an object's time cannot tell them
apart). After every round of 20, the file equals a recomputation over both hosts' files;
on moto's S3 server on loopback and on a shared folder.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from hermes_assets.lib.analytics import daily
from hermes_assets.lib.analytics.usage import daily_usage
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.loading import DatasetDays
from tests.ecosystem.test_many_hosts import s3_env  # noqa: F401  (fixture: a bucket on moto's S3 server)
from tests.ecosystem.test_object_storage import s3_endpoint  # noqa: F401  (fixture: moto's S3 server)
from tests.support.hermes_writer import START_S, HermesWriter, openai_call

pytestmark = [pytest.mark.slow]

ROUNDS = 20
DAY = "2026-06-01"
HOSTS = ("alpha", "beta")
WAIT_S = 120


def grow(store: Path, host: str, n: int) -> None:
    """Session ``s<n>`` of ``host`` on :data:`DAY`, with a tool call (its figures are the host's own)."""
    with HermesWriter(store, start_s=START_S) as w:
        w.at(START_S + 60 * n)
        sid = w.session(f"s{n}", "cli", cwd=f"/work/{host}", model=f"{host}-model")
        w.msg(sid, "user", f"{host} asks {n}")
        w.msg(sid, "assistant", "", tool_calls=[openai_call(f"c{n}", f"{host}_tool", {"n": n})])
        w.msg(sid, "tool", '{"exit_code": 0}', tool_call_id=f"c{n}", tool_name=f"{host}_tool")
        w.end(sid)


def host_process(host: str, uri: str, spool: str, store: str, sync: dict, out) -> None:
    """One host's rounds (run in its own process, started by ``spawn``)."""
    wh = Warehouse(uri, spool=spool, host=host, host_named=True)
    wh.settle_ids()
    for round_ in range(ROUNDS):
        sync["start"].wait(WAIT_S)
        out.put(play_round(wh, store, round_, sync))
        sync["done"].wait(WAIT_S)


def play_round(wh: Warehouse, store: str, round_: int, sync: dict) -> tuple:
    """Capture the day, then compute its analytics, in this round's order: the early host reads
    before the late one captures; both put each file at the same instant. -> (host, round,
    early, how many times it computed a file again)."""
    import structlog

    from hermes_assets.lib.source.stores import Store, on_host
    from tests.support.capture_run import capture_days

    early = HOSTS[round_ % 2] == wh.host
    read_done, late_captured = sync["read_done"][round_], sync["late_captured"][round_]
    first_write = {daily.USAGE: True, daily.TOOLS: True}
    real_replace = Warehouse.replace_day
    inputs = {name: DatasetDays(wh, name, [DAY], cols) for name, cols in daily.INPUTS.items()}
    reads = 0

    def at_once(self, dataset, day, table, read):
        if first_write[dataset]:  # each file's first write this round: both hosts at the same instant
            first_write[dataset] = False
            sync["write"].wait(WAIT_S)
        return real_replace(self, dataset, day, table, read)

    def read():
        nonlocal reads
        tables = daily.read_inputs(inputs, DAY)
        reads += 1
        if early and reads == 1:  # read before the other host wrote its new rows, then wait for them
            read_done.set()
            late_captured.wait(WAIT_S)
        return tables

    if not early:
        read_done.wait(WAIT_S)
    capture_days(on_host([Store(store)], wh.host, scoped=True), wh, days=[DAY])
    if not early:
        late_captured.set()
    Warehouse.replace_day = at_once  # type: ignore[method-assign]
    try:
        with structlog.testing.capture_logs() as events:
            for dataset in (daily.USAGE, daily.TOOLS):
                daily.write_current_day(wh, dataset, DAY, read)
    finally:
        Warehouse.replace_day = real_replace  # type: ignore[method-assign]
    recomputed = sum(1 for e in events if e["event"] == "hermes.analytics.recomputed")
    return wh.host, round_, early, recomputed


def race(uri: str, tmp_path: Path) -> list[tuple]:
    ctx = multiprocessing.get_context("spawn")
    stores = {h: tmp_path / h / "state.db" for h in HOSTS}
    for h in HOSTS:
        stores[h].parent.mkdir(parents=True)
    sync = {
        "start": ctx.Barrier(3),
        "write": ctx.Barrier(2),
        "done": ctx.Barrier(3),
        "read_done": [ctx.Event() for _ in range(ROUNDS)],
        "late_captured": [ctx.Event() for _ in range(ROUNDS)],
    }
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=host_process, args=(h, uri, str(tmp_path / f"spool-{h}"), str(stores[h]), sync, out), daemon=True
        )
        for h in HOSTS
    ]
    for p in procs:
        p.start()
    reader = Warehouse(uri, spool=str(tmp_path / "spool-reader"), host="reader")
    results = []
    try:
        for round_ in range(ROUNDS):
            for h in HOSTS:
                grow(stores[h], h, round_)
            sync["start"].wait(WAIT_S)
            results += [out.get(timeout=WAIT_S) for _ in HOSTS]
            tables = {n: DatasetDays(reader, n, [DAY], c).read(DAY) for n, c in daily.INPUTS.items()}
            usage = daily_usage(DAY, tables[SESSIONS], tables[MESSAGES], tables[GATEWAY])
            assert usage.totals["sessions"] == 2 * (round_ + 1), round_  # both hosts' sessions are in
            for dataset in (daily.USAGE, daily.TOOLS):  # the two each host writes here
                want = daily.compute_day(dataset, DAY, tables).table
                assert reader.read(dataset, DAY) == want, f"round {round_}: {dataset} misses a host's rows"
            sync["done"].wait(WAIT_S)
    finally:
        for p in procs:
            p.join(WAIT_S)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    return results


def check_rounds(results: list[tuple]) -> None:
    assert len(results) == 2 * ROUNDS
    # the race was real in every round: the stale host computed again (its write refused, or its inputs moved)
    stale = {r: n for host, r, early, n in results if early}
    assert sorted(stale) == list(range(ROUNDS)) and all(n >= 1 for n in stale.values()), stale


def test_two_hosts_racing_on_one_days_analytics_in_one_bucket(tmp_path, s3_env):
    uri, _ = s3_env
    check_rounds(race(uri, tmp_path))


def test_two_hosts_racing_on_one_days_analytics_in_one_shared_folder(tmp_path):
    os.environ.setdefault("HERMES_ASSETS_LOG_FORMAT", "json")
    check_rounds(race(str(tmp_path / "shared-warehouse"), tmp_path))
