"""Fault 6: hostile cells (SPEC §9 "Bad input", §5.3, §5.4, §7).

One store holds every hostile cell at once, next to an ordinary session captured
before they arrived. Cells go in through the real Hermes writer wherever it
accepts them and by RAW SQL (``HermesWriter.raw_sql``) where it does not. One
run captures it (module fixture); each test checks one kind of cell.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from hermes_assets.lib.plan import policy
from tests.defs.harness import ANALYTICS, EXPOSURES, SIGHTINGS
from tests.faults import forking
from tests.faults.helpers import (
    DAY1,
    GATEWAY,
    MESSAGES,
    SESSIONS,
    assert_nothing_lost,
    assert_sound,
    new_install,
    write_scenario,
)
from tests.support.hermes_writer import START_S, openai_call

TEN_MB = 10 * 1024 * 1024
WEIRD_SID = "../x/'q\"😀/.."
DEEP_CWD = "/a" * 1500
PROJECT_STEP = "hermes_capture.project_rows"


def _hypignore_scopes(base) -> dict[str, str]:
    """name -> scope dir whose .hypignore is hostile; the class SPEC §7 says it yields."""
    scopes = {}
    for name in ("empty", "binary", "huge", "loop", "dangling", "fifo", "directory", "chmod000"):
        scopes[name] = base / name
        scopes[name].mkdir(parents=True)
    (scopes["empty"] / ".hypignore").write_bytes(b"")
    (scopes["binary"] / ".hypignore").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe" + bytes(range(256)) * 4)
    with open(scopes["huge"] / ".hypignore", "wb") as f:  # a 20 MB file whose first line says local-only
        f.write(b"local-only   # the rest is junk\n")
        f.write(b"x" * (20 * 1024 * 1024))
    os.symlink(".hypignore", scopes["loop"] / ".hypignore")  # ELOOP: unreadable even for root
    os.symlink("/nonexistent/hypignore", scopes["dangling"] / ".hypignore")
    os.mkfifo(scopes["fifo"] / ".hypignore")  # opening it must not hang
    (scopes["directory"] / ".hypignore").mkdir()
    (scopes["chmod000"] / ".hypignore").write_text("local-only\n")
    os.chmod(scopes["chmod000"] / ".hypignore", 0)
    return {name: str(path) for name, path in scopes.items()}


#: the class each hostile .hypignore yields for root (chmod 000 does not stop root: local-only)
HYPIGNORE_CLASS = {
    "empty": "ignore",
    "binary": "ignore",
    "huge": "local-only",
    "loop": "ignore",
    "dangling": "ignore",
    "fifo": "ignore",
    "directory": "ignore",
    "chmod000": "local-only",
}


class Hostile:
    """The store, its mids by name, and what the capture made of it."""

    def __init__(self, install, scope_base):
        self.install = install
        self.scope_base = scope_base
        self.mids: dict[str, int] = {}
        self.scopes: dict[str, str] = {}

    def build(self) -> None:
        inst = self.install
        with inst.writer() as w:
            write_scenario(w, 1)
        self.run1 = inst.run(DAY1).ok()
        self.baseline = inst.state()
        self.scopes = _hypignore_scopes(self.scope_base / "scopes")
        with inst.writer() as w:
            w.at(START_S + 1800)
            self._through_the_writer(w)
            self._raw(w)
        self.run2 = inst.run(DAY1).ok()
        self.state = inst.state()
        self.run3 = inst.run(DAY1).ok()
        self.state3 = inst.state()

    def _through_the_writer(self, w) -> None:
        m = self.mids
        s = w.session("tools", "cli", cwd="/work/hostile")
        m["malformed_calls"] = w.msg(
            s, "assistant", "malformed calls follow", tool_calls=[openai_call("c0", "terminal", {"cmd": "ls"})]
        )
        m["deep_calls"] = w.msg(
            s, "assistant", "deeply nested calls follow", tool_calls=[openai_call("c1", "terminal", {"cmd": "ls"})]
        )
        m["args_not_json"] = w.msg(s, "assistant", "", tool_calls=[openai_call("c2", "terminal", "ls -la {not json")])
        m["args_deep"] = w.msg(
            s, "assistant", "", tool_calls=[openai_call("c3", "terminal", "[" * 50000 + "]" * 50000)]
        )
        m["surrogate_args"] = w.msg(s, "assistant", "", tool_calls=[openai_call("c4", "terminal", {"q": "x\udc00y"})])
        s = w.session("many-calls", "cli", cwd="/work/hostile")
        m["many_calls"] = w.msg(
            s,
            "assistant",
            "",
            tool_calls=[openai_call(f"call-{i:05d}", "read_file", {"path": f"/src/{i}.py"}) for i in range(10_000)],
        )
        s = w.session("times", "cli", cwd="/work/hostile")
        for name in ("ts_null", "ts_negative", "ts_1e20", "ts_text"):
            m[name] = w.msg(s, "user", f"timestamp {name}")
        s = w.session("text", "cli", cwd="/work/hostile")
        m["nul"] = w.msg(s, "user", "before\x00after")
        m["surrogate_envelope"] = w.msg(s, "user", [{"type": "text", "text": "x\ud800y"}])
        m["surrogate_bytes"] = w.msg(s, "user", "placeholder")
        m["invalid_utf8"] = w.msg(s, "user", "placeholder")
        m["ten_mb"] = w.msg(s, "assistant", "placeholder")
        w.msg(w.session(WEIRD_SID, "cli", cwd="/work/hostile"), "user", "a session id with / .. quotes and emoji")
        w.msg(w.session("newline-cwd", "cli", cwd="/work/a\nb"), "user", "a cwd with a newline")
        w.msg(w.session("deep-cwd", "cli", cwd=DEEP_CWD), "user", "a cwd 1,500 folders deep")
        w.msg(w.session("nul-cwd", "cli", cwd="/work/a\x00b"), "user", "HOSTILE-NUL-CWD a cwd with a NUL")
        for name, scope in self.scopes.items():
            sid = w.session(f"hyp-{name}", "cli", cwd=scope)
            w.msg(sid, "user", f"HOSTILE-HYPIGNORE-{name}")

    def _raw(self, w) -> None:
        m = self.mids
        w.allow_nulls("messages", "timestamp")
        raw = w.raw_sql
        raw(
            "UPDATE messages SET tool_calls = ? WHERE id = ?",
            ('[{"id": "c0", "function": {"name": "terminal", "argu', m["malformed_calls"]),
        )
        raw("UPDATE messages SET tool_calls = ? WHERE id = ?", ("[" * 100_000 + "]" * 100_000, m["deep_calls"]))
        for name, value in (("ts_null", None), ("ts_negative", -5.0), ("ts_1e20", 1e20), ("ts_text", "ten o'clock")):
            raw("UPDATE messages SET timestamp = ? WHERE id = ?", (value, m[name]))
        raw(
            "UPDATE messages SET content = CAST(? AS TEXT) WHERE id = ?",
            (b"lone \xed\xa0\x80 surrogate", m["surrogate_bytes"]),
        )
        raw(
            "UPDATE messages SET content = CAST(? AS TEXT) WHERE id = ?",
            (b"bad \xf0\x28\x8c\x28 utf8", m["invalid_utf8"]),
        )
        raw("UPDATE sessions SET title = CAST(? AS TEXT) WHERE id = 'text'", (b"title \xff\xfe",))
        self.ten_mb = ("0123456789abcdef" * (TEN_MB // 16))[:TEN_MB]
        raw("UPDATE messages SET content = ? WHERE id = ?", (self.ten_mb, m["ten_mb"]))

    # -- views ------------------------------------------------------------------

    def parts(self, mid: int) -> list[dict]:
        rows = [r for r in self.state.rows[GATEWAY].values() if r["provider_uuid"] == str(mid)]
        return sorted(rows, key=lambda r: r["message_index"])

    def message(self, mid: int) -> dict:
        (row,) = [r for r in self.state.rows[MESSAGES].values() if r["id"] == mid]
        return row

    def errors_by_kind(self, dataset: str = GATEWAY) -> dict:
        return self.run2.metadata(PROJECT_STEP)[f"{dataset}.errors_by_kind"]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    inst = new_install(tmp_path_factory.mktemp("hostile"))
    with pytest.MonkeyPatch.context() as mp:
        for name in ("HERMES_STATE_DB", "HERMES_ASSETS_WORKERS", "HERMES_ASSETS_START_DATE"):
            mp.delenv(name, raising=False)
        for name, value in inst.environ().items():
            mp.setenv(name, value)
        scope_base = Path(tempfile.mkdtemp(prefix="hermes-scopes-", dir="/tmp"))
        os.chmod(scope_base, 0o755)
        try:
            h = Hostile(inst, scope_base)
            h.build()
            yield h
        finally:
            shutil.rmtree(scope_base, ignore_errors=True)


def test_the_hostile_store_is_captured_in_one_run_and_loses_nothing(hostile):
    """Protects SPEC §9 "one bad cell never sinks a partition": with every hostile cell
    below in the day, the run succeeds, every partition file reads whole, the rows
    captured before the cells arrived are unchanged, and a re-run writes byte-identical
    files (no duplicates, deterministic)."""
    assert_sound(hostile.install.warehouse)
    assert_nothing_lost(hostile.baseline, hostile.state)
    for dataset in (GATEWAY, SESSIONS, MESSAGES):
        for key, row in hostile.baseline.rows[dataset].items():
            assert hostile.state.rows[dataset][key] == row, (dataset, key)
    assert hostile.state3.files == hostile.state.files


def test_malformed_and_deeply_nested_tool_calls(hostile):
    """Protects SPEC §5.3/§9: tool_calls that are truncated JSON, or valid JSON nested
    100,000 deep (Python's parser raises RecursionError, not a JSON error), yield no
    tool_call part, keep the message's text part, and are counted as bad_tool_calls."""
    for name in ("malformed_calls", "deep_calls"):
        parts = hostile.parts(hostile.mids[name])
        assert [p["part_type"] for p in parts] == ["text"], name
    assert hostile.errors_by_kind().get("bad_tool_calls", 0) >= 2


def test_tool_arguments_that_are_not_json_are_kept_raw(hostile):
    """Protects SPEC §5.3: arguments that do not parse (plain text, or JSON nested 50,000
    deep) are kept as the raw string in tool_args, never dropped and never failing the
    partition; escaped lone surrogates in arguments become U+FFFD."""
    (part,) = hostile.parts(hostile.mids["args_not_json"])
    assert json.loads(part["tool_args"]) == "ls -la {not json"
    (part,) = hostile.parts(hostile.mids["args_deep"])
    assert json.loads(part["tool_args"]) == "[" * 50000 + "]" * 50000
    (part,) = hostile.parts(hostile.mids["surrogate_args"])
    assert json.loads(part["tool_args"]) == {"q": "x\ufffdy"}


def test_ten_thousand_tool_calls_in_one_message(hostile):
    """Protects SPEC §5.2 at scale: one message with 10,000 tool calls yields 10,000
    tool_call parts, in order, with their ids and names, and consecutive indexes."""
    parts = hostile.parts(hostile.mids["many_calls"])
    assert len(parts) == 10_000
    assert [p["tool_call_id"] for p in parts] == [f"call-{i:05d}" for i in range(10_000)]
    indexes = [p["message_index"] for p in parts]
    assert indexes == list(range(indexes[0], indexes[0] + 10_000))
    assert json.loads(parts[-1]["tool_args"]) == {"path": "/src/9999.py"}


@pytest.mark.parametrize("name", ["ts_null", "ts_negative", "ts_1e20", "ts_text"])
def test_bad_timestamps_fall_back_and_are_counted(hostile, name):
    """Protects SPEC §5.1/§9: a message timestamp that is NULL, negative, 1e20 or text that
    is no time is kept as NULL in hermes_messages, the canonical row is still written with
    message_created_at = conversation_started_at (and a matching `date`), and counted in
    both datasets (the NULL one is not counted: NULL is no bad cell)."""
    (part,) = hostile.parts(hostile.mids[name])
    assert part["message_created_at"] == part["conversation_started_at"]
    assert part["date"] == DAY1
    assert hostile.message(hostile.mids[name])["timestamp"] is None
    assert hostile.errors_by_kind().get("bad_timestamp", 0) >= 4
    assert hostile.errors_by_kind(MESSAGES).get("bad_timestamp", 0) >= 3


def test_nul_surrogates_and_invalid_utf8(hostile):
    """Protects SPEC §1 "Text" and §5.4: a NUL inside content is kept (never truncates);
    a lone surrogate, escaped in a JSON envelope by the real writer or stored as raw
    surrogate bytes, becomes U+FFFD; invalid UTF-8 bytes in a message and in a session
    title are decoded with U+FFFD and counted as bad_text, without failing the batch."""
    (part,) = hostile.parts(hostile.mids["nul"])
    assert part["content_text"] == "before\x00after"
    (part,) = hostile.parts(hostile.mids["surrogate_envelope"])
    assert part["content_text"] == "x\ufffdy"
    (part,) = hostile.parts(hostile.mids["surrogate_bytes"])
    assert part["content_text"].startswith("lone ") and "\ufffd" in part["content_text"]
    (part,) = hostile.parts(hostile.mids["invalid_utf8"])
    assert part["content_text"].startswith("bad ") and "\ufffd" in part["content_text"]
    title = [r["title"] for r in hostile.state.rows[SESSIONS].values() if r["id"] == "text"]
    assert title == ["title \ufffd\ufffd"]
    assert hostile.errors_by_kind().get("bad_text", 0) >= 2


def test_a_ten_megabyte_cell_is_kept_whole(hostile):
    """Protects SPEC §5.4: a 10 MB content cell is kept whole in both datasets (nothing
    trimmed or capped) and counted as an oversized_cell warning, not an error."""
    (part,) = hostile.parts(hostile.mids["ten_mb"])
    assert part["content_text"] == hostile.ten_mb
    assert hostile.message(hostile.mids["ten_mb"])["content"] == hostile.ten_mb
    assert hostile.errors_by_kind().get("oversized_cell", 0) >= 1


def test_session_id_with_slashes_dots_quotes_and_emoji(hostile):
    """Protects the warehouse layout against hostile ids: a session id with '/', '..',
    quotes and an emoji is captured under its own ids in all three datasets, and no file
    or folder appears anywhere but the datasets' (and the analytics') day folders (ids
    never become paths)."""
    sids = {r["id"] for r in hostile.state.rows[SESSIONS].values()}
    assert WEIRD_SID in sids
    assert any(r["session_id"] == "hermes-" + WEIRD_SID for r in hostile.state.rows[GATEWAY].values())
    root = hostile.install.warehouse
    for path in root.rglob("*"):
        rel = path.relative_to(root).parts
        assert rel[0] in (GATEWAY, SESSIONS, MESSAGES, SIGHTINGS, *ANALYTICS, EXPOSURES, ".staging", ".hosts"), path
        if rel[0] == ".hosts":  # the hosts' claims: on the ids (host=<label>), labels and stores (digests)
            assert len(rel) <= 3 and (len(rel) < 2 or rel[1].startswith("host=") or rel[1] in ("labels", "stores"))
            assert len(rel) < 3 or re.fullmatch(r"[A-Za-z][A-Za-z0-9._-]*\.json|[0-9a-f]{32}\.json", rel[2]), path
        elif rel[0] == EXPOSURES:  # one file, not partitioned: <dataset>/<file>
            assert len(rel) <= 2, path
        elif rel[0] != ".staging":
            # <dataset>/day=<day>/host=<label>/<file> (a derived dataset: <dataset>/day=<day>/<file>)
            assert len(rel) <= 4 and (len(rel) < 2 or rel[1].startswith("day=")), path
            assert len(rel) < 4 or rel[2].startswith("host="), path


def test_cwd_with_a_newline(hostile):
    """Protects SPEC §5.7/§7: a cwd containing a newline is kept verbatim as cwd and as
    the session's scope path; policy resolution of such a path does not fail."""
    (row,) = [r for r in hostile.state.rows[SESSIONS].values() if r["id"] == "newline-cwd"]
    assert row["cwd"] == "/work/a\nb" and row["scope_path"] == "/work/a\nb"
    assert any(r["cwd"] == "/work/a\nb" for r in hostile.state.rows[GATEWAY].values())


def test_cwd_a_thousand_folders_deep_and_cwd_with_a_nul(hostile):
    """Protects policy resolution (SPEC §7) against hostile scopes: a cwd 1,500 folders
    deep is classified (the walk up to `/` is a loop, not a recursion that overflows) and
    captured; a cwd with a NUL cannot name a file, so whether a .hypignore governs it
    cannot be checked: fail safe, `ignore`, never a crash of the run."""
    classes = {r["id"]: r["policy_class"] for r in hostile.state.rows[SESSIONS].values()}
    assert classes.get("deep-cwd") == "full"
    assert "nul-cwd" not in classes
    assert not any("HOSTILE-NUL-CWD" in (r["content_text"] or "") for r in hostile.state.rows[GATEWAY].values())


@pytest.mark.parametrize("name", sorted(HYPIGNORE_CLASS))
def test_hostile_hypignore_files(hostile, name):
    """Protects SPEC §7's fail-safe reading of .hypignore: an empty file, a binary file, a
    symlink loop, a dangling symlink, a FIFO (never blocks) and a directory all mean
    `ignore` (the session is absent from every dataset); a 20 MB file is read no further
    than its first line (`local-only`); chmod 000 does not stop root (local-only; the
    unprivileged case is the next test)."""
    sid = f"hyp-{name}"
    expected = HYPIGNORE_CLASS[name]
    sessions = [r for r in hostile.state.rows[SESSIONS].values() if r["id"] == sid]
    in_gateway = [r for r in hostile.state.rows[GATEWAY].values() if r["session_id"] == "hermes-" + sid]
    if expected == "ignore":
        assert sessions == [] and in_gateway == []
        assert not any(r["session_id"] == sid for r in hostile.state.rows[MESSAGES].values())
    else:
        assert [r["policy_class"] for r in sessions] == [expected]
        assert in_gateway and all(json.loads(r["attributes"])["hermes"].get("policy") == expected for r in in_gateway)


def test_unreadable_hypignore_means_ignore_for_an_unprivileged_user(hostile):
    """Protects SPEC §7 "An unreadable file -> ignore" where permissions do apply: read by
    uid 65534 (a forked child; root ignores mode bits), a chmod 000 .hypignore that says
    local-only classifies its scope `ignore`, and the resolver reports it unreadable."""
    scope = hostile.scopes["chmod000"]  # under a 0755 folder of /tmp (pytest's are 0700)

    def classify():
        resolver = policy.PolicyResolver("/nonexistent/policy.json")
        return {"class": resolver.classify_scope(scope), "warnings": resolver.warnings}

    child = forking.fork(classify, nobody=True).result()
    assert child["ok"], child
    assert child["value"]["class"] == "ignore"
    assert [w["event"] for w in child["value"]["warnings"]] == ["hypignore_unreadable"]
