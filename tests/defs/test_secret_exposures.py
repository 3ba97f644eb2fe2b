"""What to rotate: ``hermes_secret_exposures`` equals what the stores hold, and a key can be checked.

Hermes's real writer (hermes-agent 0.19) writes two stores of one Hermes home (the
home's and a profile's) over two days: fake credentials built at run time from
their formats, each placed where the test says (a user turn, tool-call arguments,
a session's title), one secret in three sessions, two channels and both stores,
one in a ``.env`` file only, one behind a name that says secret, and one in a
session Hermes deletes later. The expected table comes from those placements: per
place, the markers of the keys placed there (the kind the test knows each key as, and
the keyed digest of its value, computed by the test as docs/redaction.md says), then
the sessions, messages, days, channels, stores and fields the test put each in,
and ``still_in_store`` from what the test deleted. Real Dagster runs capture the
days and compute the table; then Hermes deletes a session and they run again;
then again, changing no byte. ``python -m hermes_assets.secrets check`` finds a
key that passed and does not find one that did not. No secret is in any file,
Dagster record or console line, the check's included.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from tests.defs.harness import EXPOSURES, SIGHTINGS, Capture, md_values, part_files
from tests.defs.test_redaction import folder_bytes, warehouse_strings
from tests.defs.test_redaction_v022 import instance_records
from tests.support import fake_keys
from tests.support.hermes_writer import START_S, HermesWriter, openai_call

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DAY1, DAY2 = "2026-06-01", "2026-06-02"
HOST = "laptop"


@dataclass(frozen=True)
class Place:
    """One cell the test put secrets in."""

    store: str  # the store's label ("" the home's, "work" the profile's)
    session: str
    message: int | None  # None: a session's own cell
    field: str
    day: str
    channel: str
    text: str  # the cell as Hermes stores it


@dataclass
class World:
    keys: dict[str, str]
    places: list[Place]
    paths: dict[str, str]  # store label -> path


def write_world(capture: Capture) -> World:
    keys = {
        "github": fake_keys.github(),
        "stripe": fake_keys.stripe(),
        "openai": fake_keys.openai(),
        "assigned": fake_keys.password(),
        "env_only": fake_keys.password(),
    }
    (capture.home / ".env").write_text(f"FIRECRAWL_API_KEY={keys['env_only']}\n", encoding="utf-8")
    os.chmod(capture.home / ".env", 0o600)
    profile = capture.home / "profiles" / "work" / "state.db"
    places: list[Place] = []
    with HermesWriter(capture.store, home=capture.home, start_s=START_S) as w:
        sid = w.session("s1", "cli", model="gpt-4.1")
        text = f"my token {keys['github']} and the stripe one {keys['stripe']}"
        places.append(Place("", sid, w.msg(sid, "user", text), "messages.content", DAY1, "cli", text))
        calls = [openai_call("c1", "terminal", {"command": f"export MY_SERVICE_TOKEN={keys['assigned']}"})]
        mid = w.msg(sid, "assistant", None, tool_calls=calls, finish_reason="tool_calls")
        places.append(Place("", sid, mid, "messages.tool_calls", DAY1, "cli", json.dumps(calls)))
        w.end(sid)
        gone = w.session("s3", "cli")
        text = f"old paste {keys['openai']}"
        places.append(Place("", gone, w.msg(gone, "user", text), "messages.content", DAY1, "cli", text))
        w.end(gone)
        w.at(START_S + 86400)
        sid = w.session("s2", "telegram")
        text = f"deploy with {keys['github']}"
        w.set_session_title(sid, text)
        places.append(Place("", sid, None, "sessions.title", DAY2, "telegram", text))
        text = f"again {keys['github']}"
        places.append(Place("", sid, w.msg(sid, "user", text), "messages.content", DAY2, "telegram", text))
    with HermesWriter(profile, home=capture.home, start_s=START_S + 600) as w:
        sid = w.session("p1", "cli")
        text = f"the handle is {keys['env_only']} and {keys['github']}"
        places.append(Place("work", sid, w.msg(sid, "user", text), "messages.content", DAY1, "cli", text))
    return World(keys, places, {"": str(capture.store), "work": str(profile)})


#: the kind each key is redacted as (docs/redaction.md, 'What is a secret'): the id of the maintained
#: rule of its issued format (``github-pat`` -> ``github_pat``), an assignment whose name says secret,
#: a value of Hermes's ``.env``
KINDS = {
    "github": "github_pat",
    "stripe": "stripe_access_token",
    "openai": "openai_api_key",
    "assigned": "secret_assignment",
    "env_only": "hermes_env",
}


def marker_of(key: bytes, name: str, value: str) -> str:
    """The marker of the key the test named ``name``: its kind, and the first 8 hex of the HMAC-SHA256
    of its value under the warehouse's key (docs/redaction.md, 'The marker'), computed here."""
    return f"[REDACTED:{KINDS[name]}:{hmac.new(key, value.encode(), hashlib.sha256).hexdigest()[:8]}]"


def expected(world: World, key: bytes, deleted: set[str]) -> dict[str, dict]:
    """marker -> the row the test expects, from its placements (``deleted``: the sessions Hermes deleted)."""
    rows: dict[str, dict] = {}
    for place in world.places:
        for name, value in world.keys.items():
            if value not in place.text:
                continue
            row = rows.setdefault(
                marker_of(key, name, value),
                {
                    "kind": KINDS[name],
                    "in": False,
                    **{name: set() for name in ("sessions", "messages", "days", "channels", "stores", "fields")},
                },
            )
            row["sessions"].add((place.store, place.session))
            if place.message is not None:
                row["messages"].add((place.store, place.session, place.message))
            row["days"].add(place.day)
            row["channels"].add(place.channel)
            row["stores"].add(world.paths[place.store])
            row["fields"].add(place.field)
            row["in"] |= place.session not in deleted
    return {
        marker: {
            "kind": r["kind"],
            "still_in_store": r["in"],
            "first_day": min(r["days"]),
            "last_day": max(r["days"]),
            "sessions": len(r["sessions"]),
            "messages": len(r["messages"]),
            "channels": sorted(r["channels"]),
            "stores": sorted(r["stores"]),
            "hosts": [HOST],
            "fields": sorted(r["fields"]),
        }
        for marker, r in rows.items()
    }


def exposures_run(capture: Capture, instance: dg.DagsterInstance):
    job = capture.defs().resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(EXPOSURES)])


def table(capture: Capture) -> dict[str, dict]:
    rows = pq.read_table(capture.warehouse / EXPOSURES / "part-0.parquet").to_pylist()
    return {r["marker"]: r for r in rows}


def checked(value: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_assets.secrets", "check", *args],
        input=value,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
        timeout=120,
    )


def test_exposures_equal_what_the_stores_hold_and_a_key_is_checked(capture: Capture, monkeypatch, capfd):
    monkeypatch.setenv("HERMES_ASSETS_HOST", HOST)
    world = write_world(capture)
    instance = dg.DagsterInstance.local_temp(str(capture.dagster_home))
    try:
        assert capture.materialize(DAY1, DAY2, instance=instance).success
        result = exposures_run(capture, instance)
        assert result.success
        key = (capture.dagster_home / "redaction.key").read_bytes()
        want = expected(world, key, deleted=set())
        got = table(capture)
        assert {m: {k: r[k] for k in want[m]} for m, r in got.items()} == want
        # the secrets per kind: what the table holds, and what the UI plots
        per_kind = Counter(r["kind"] for r in want.values())
        assert Counter(r["kind"] for r in got.values()) == per_kind
        (md,) = [md_values(m.metadata) for m in result.asset_materializations_for_node(EXPOSURES)]
        assert {k[len("secrets.") :]: v for k, v in md.items() if k.startswith("secrets.")} == per_kind
        assert md["dagster/row_count"] == len(want) and md["still_in_store"] == len(want)
        # what recognises a key: the provider's prefix it starts with and its last four characters
        for name in ("github", "stripe", "openai"):
            row = got[marker_of(key, name, world.keys[name])]
            assert row["prefix"] and world.keys[name].startswith(row["prefix"]), name
            assert row["last4"] == world.keys[name][-4:], name
        github = got[marker_of(key, "github", world.keys["github"])]
        assert (github["sessions"], github["channels"]) == (3, ["cli", "telegram"]) and len(github["stores"]) == 2

        # Hermes deletes a session: the secret it held is kept, no longer in the store
        with HermesWriter(capture.store, home=capture.home) as w:
            w.delete_session("s3")
        assert capture.materialize(DAY1, DAY2, instance=instance).success
        assert exposures_run(capture, instance).success
        want = expected(world, key, deleted={"s3"})
        assert {m: {k: r[k] for k in want[m]} for m, r in table(capture).items()} == want
        assert not table(capture)[marker_of(key, "openai", world.keys["openai"])]["still_in_store"]
        # nothing new: no byte of any file changes, the sightings' and the exposures' included
        before = part_files(capture.warehouse)
        assert any(p.startswith(SIGHTINGS + "/") for p in before) and f"{EXPOSURES}/part-0.parquet" in before
        assert capture.materialize(DAY1, DAY2, instance=instance).success
        assert exposures_run(capture, instance).success
        assert part_files(capture.warehouse) == before

        # the check: a key that passed (still stored, or only in deleted rows), one that did not
        seen = checked(world.keys["github"] + "\n")
        assert seen.returncode == 0, seen.stderr
        assert marker_of(key, "github", world.keys["github"]) in seen.stdout and "STILL IN" in seen.stdout
        assert all(sid in seen.stdout for sid in ("s1", "s2", "p1")) and "telegram" in seen.stdout
        deleted = checked(world.keys["openai"])
        assert deleted.returncode == 0 and "only in rows Hermes has deleted" in deleted.stdout
        assert checked(world.keys["assigned"]).returncode == 0  # found by the name it was assigned to
        assert checked(world.keys["env_only"]).returncode == 0  # found as a value of Hermes's .env
        never = checked(fake_keys.github())
        assert never.returncode == 1 and "not seen" in never.stdout
        refused = checked("", world.keys["stripe"])  # on the command line: refused, never echoed
        assert refused.returncode == 2 and world.keys["stripe"] not in refused.stdout + refused.stderr
        assert "stdin" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
        out, err = capfd.readouterr()
        records = instance_records(instance)
    finally:
        instance.dispose()

    # no secret in any file, Dagster record or console line (the check's output included)
    strings = "\n".join(warehouse_strings(capture.warehouse))
    raw = folder_bytes(capture.dagster_home)
    consoles = [out, err] + [c.stdout + c.stderr for c in (seen, deleted, never, refused)]
    for name, value in world.keys.items():
        assert value not in strings, f"{name} in a Parquet file"
        assert value.encode() not in raw, f"{name} in DAGSTER_HOME"
        assert value not in records, f"{name} in the instance's records"
        assert not any(value in c for c in consoles), f"{name} on the console"


def test_the_check_refuses_a_mistake_in_one_line(capture: Capture):
    (capture.warehouse).mkdir(parents=True)
    no_key = checked(fake_keys.github())
    assert no_key.returncode == 2 and "no redaction key" in no_key.stderr
    assert len(no_key.stderr.strip().splitlines()) == 1
    (capture.dagster_home / "redaction.key").write_bytes(os.urandom(32))
    assert checked(fake_keys.github()).returncode == 1  # a warehouse that saw nothing
    nothing = checked("\n")
    assert nothing.returncode == 2 and "no key on stdin" in nothing.stderr
    os.rmdir(capture.warehouse)
    no_warehouse = checked(fake_keys.github())
    assert no_warehouse.returncode == 2 and "no warehouse" in no_warehouse.stderr
    assert not capture.warehouse.exists() and set(os.listdir(capture.dagster_home)) == {"redaction.key"}


def test_the_pass_over_stored_files_keeps_the_sightings_right(capture: Capture, monkeypatch):
    """Files written with redaction off, one of whose sessions Hermes has deleted since (its rows exist
    nowhere else): the run that redacts them again records what it redacted, on the day it was, as no
    longer in the store; the secrets of the sessions still there are the capture's, once."""
    kept, old = fake_keys.github(), fake_keys.stripe()
    with HermesWriter(capture.store, home=capture.home, start_s=START_S) as w:
        sid = w.session("s-kept", "cli")
        w.msg(sid, "user", f"token {kept}")
        gone = w.session("s-gone", "telegram")
        w.msg(gone, "user", f"old paste {old}")
    monkeypatch.setenv("HERMES_ASSETS_REDACT_SECRETS", "off")
    assert capture.materialize(DAY1).success
    assert not (capture.warehouse / SIGHTINGS).exists()  # a run that does not redact sees nothing
    with HermesWriter(capture.store, home=capture.home) as w:
        w.delete_session("s-gone")
    monkeypatch.setenv("HERMES_ASSETS_REDACT_SECRETS", "on")
    instance = dg.DagsterInstance.local_temp(str(capture.dagster_home))
    try:
        assert capture.materialize(DAY1, instance=instance).success
        assert exposures_run(capture, instance).success
        key = (capture.dagster_home / "redaction.key").read_bytes()
        got = table(capture)
        assert set(got) == {marker_of(key, "github", kept), marker_of(key, "stripe", old)}
        stored = got[marker_of(key, "stripe", old)]
        assert not stored["still_in_store"] and stored["channels"] == ["telegram"] and stored["sessions"] == 1
        assert stored["fields"] == ["hermes_messages.content", "hermes_messages.content_text"]
        assert stored["first_day"] == DAY1 and stored["first_seen"] is not None
        assert got[marker_of(key, "github", kept)]["still_in_store"] and got[marker_of(key, "github", kept)][
            "fields"
        ] == ["messages.content"]
        before = part_files(capture.warehouse)
        assert capture.materialize(DAY1, instance=instance).success
        assert exposures_run(capture, instance).success
        assert part_files(capture.warehouse) == before
    finally:
        instance.dispose()


def test_exposures_equal_what_a_v022_store_holds_per_kind(capture: Capture):
    """The store Hermes v0.22.2's own writer makes with a fake credential of every kind
    (``tools/gen_secret_store_v022.py``): one row per secret it put in, of that secret's kind and
    marker (as ``tests/defs/test_redaction_v022.py`` expects it in the datasets), in its one session."""
    from tests.defs.test_redaction_v022 import SECRET_SID, TOOL, expected_marker
    from tests.support.hermes_venv import hermes_python

    reading = capture.root / "reading.json"
    subprocess.run([str(hermes_python()), str(TOOL), str(capture.home), str(reading)], check=True, cwd=REPO)
    secrets = json.loads(reading.read_text(encoding="utf-8"))["secrets"]
    instance = dg.DagsterInstance.local_temp(str(capture.dagster_home))
    try:
        assert capture.materialize(DAY1, instance=instance).success
        assert exposures_run(capture, instance).success
    finally:
        instance.dispose()
    key = (capture.dagster_home / "redaction.key").read_bytes()
    want = {expected_marker(key, entry) for entry in secrets.values()}
    got = table(capture)
    assert Counter(r["kind"] for r in got.values()) == Counter(m.split(":")[1] for m in want)
    assert set(got) == want
    for row in got.values():
        assert row["still_in_store"] and row["sessions"] == 1 and row["channels"] == ["cli"], row["marker"]
    rows = pq.read_table(next((capture.warehouse / SIGHTINGS).rglob("part-0.parquet"))).to_pylist()
    assert {r["session_id"] for r in rows} == {SECRET_SID}
