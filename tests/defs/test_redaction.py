"""No credential reaches the warehouse in the clear.

The real Hermes writer (hermes-agent 0.19) and a schema-31 (v0.22-shaped) profile store
write every kind of credential in every text field a session has, plus values that only
the Hermes home's ``.env`` files name. After a capture, no string of any Parquet file
(nested values and JSON included), no byte of the Dagster instance's folder and nothing
the run printed holds one. Credentials are built at run time from their formats.
"""

from __future__ import annotations

import json
import os
import re
import stat
import string

import dagster as dg
import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.redaction.redactor import rule_matcher
from hermes_assets.lib.warehouse.partition_file import VERSION_KEY
from tests.defs.harness import DATASETS, Capture, part_files
from tests.lib.redaction.test_redactor import ALNUM, FORMAT_KINDS, chars, fake
from tests.support.hermes_writer import START_S, HermesWriter, openai_call
from tests.support.schema31 import Schema31Store

DAY = "2026-06-01"
MARKER = re.compile(r"\[REDACTED:[a-z_]+:[0-9a-f]{8}\]")


def secret_set() -> dict[str, str]:
    """One fresh credential of every kind (the keys name where each is placed)."""
    out = {maker: fake(maker) for maker, _ in FORMAT_KINDS}
    out["pem_body"] = chars(64, ALNUM + "+/")
    out["url_password"] = chars(16)
    out["bearer"] = chars(40)
    out["assigned"] = chars(26)
    out["aws_secret"] = chars(40, ALNUM + "/+")
    out["env_only"] = chars(18, string.ascii_lowercase)  # no prefix: only the .env names it
    out["profile_env_only"] = chars(24)
    out["webhook"] = (
        "T" + chars(10, string.ascii_uppercase) + "/B" + chars(10, string.ascii_uppercase) + "/" + chars(24)
    )
    return out


def prose(s: dict[str, str]) -> str:
    """Every secret of ``s`` in one text, each in a typical place."""
    pem = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{s['pem_body']}\n-----END OPENSSH PRIVATE KEY-----"
    formats = " ".join(s[maker] for maker, _ in FORMAT_KINDS)
    return (
        f"keys: {formats}\n{pem}\n"
        f"DATABASE_URL=postgres://app:{s['url_password']}@db.internal:5432/prod\n"
        f"curl -H 'Authorization: Bearer {s['bearer']}' https://api.example.com\n"
        f"export MY_SERVICE_TOKEN={s['assigned']}\n"
        f"aws_secret_access_key = {s['aws_secret']}\n"
        f"env says {s['env_only']} and {s['profile_env_only']}\n"
        f"hook https://hooks.slack.com/services/{s['webhook']}\n"
    )


def write_env(home, s: dict[str, str]) -> None:
    (home / ".env").write_text(f"FIRECRAWL_API_KEY={s['env_only']}\nTERMINAL_ENV=local\n", encoding="utf-8")
    os.chmod(home / ".env", 0o600)
    profile = home / "profiles" / "work"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / ".env").write_text(f"UPSTREAM_HANDLE={s['profile_env_only']}\n", encoding="utf-8")


def write_v019_store(capture: Capture, s: dict[str, str]) -> None:
    text = prose(s)
    with HermesWriter(capture.store, home=capture.home, start_s=START_S) as w:
        sid = w.session(
            "s-secret",
            "cli",
            model="gpt-4.1",
            model_config={"api_key": s["assigned"], "note": text},
            system_prompt=text,
        )
        w.set_session_title(sid, "deploy with " + s["openai_api_key"])
        w.msg(sid, "user", "please use these:\n" + text)
        w.msg(
            sid,
            "assistant",
            "I will run it. " + text,
            reasoning="thinking about " + text,
            reasoning_content=text,
            reasoning_details=[{"type": "reasoning.text", "text": text}],
            tool_calls=[
                openai_call("call_1", "terminal", {"command": f"export OPENAI_API_KEY={s['openai_api_key']} && env"}),
                openai_call("call_2", "write_file", {"path": ".env", "content": text}),
            ],
        )
        w.msg(sid, "tool", text, tool_call_id="call_1", tool_name="terminal")
        w.msg(sid, "tool", json.dumps({"output": text, "exit_code": 0}), tool_call_id="call_2", tool_name="write_file")
        w.msg(sid, "assistant", [{"type": "text", "text": "echo: " + text}])
        w.end(sid)


def write_v022_profile_store(capture: Capture, s: dict[str, str]) -> None:
    text = prose(s)
    path = capture.home / "profiles" / "work" / "state.db"
    with Schema31Store(
        path, extra_session_columns={"future_note": "TEXT"}, extra_message_columns={"future_blob": "TEXT"}
    ) as st:
        st.session(
            "p-secret",
            "cli",
            started_at=START_S + 60,
            prompt=text,
            title="title " + s["github_token"],
            model_config=json.dumps({"headers": {"Authorization": "Basic " + s["bearer"]}}),
            last_activity_description=text,
            handoff_error=text,
            future_note=text,
        )
        st.message(
            "p-secret",
            "user",
            text,
            timestamp=START_S + 61,
            message_uid="u1",
            display_metadata=json.dumps({"shown": text, "nested": [{"k": s["huggingface_token"]}]}),
            api_content=text,
            future_blob=text,
        )
        st.message(
            "p-secret",
            "assistant",
            "ok " + s["jwt"],
            timestamp=START_S + 62,
            message_uid="u2",
            tool_calls=json.dumps([openai_call("c9", "terminal", json.dumps({"cmd": "echo " + text}))]),
            codex_reasoning_items=json.dumps([{"summary": text}]),
            codex_message_items=json.dumps([{"content": text}]),
        )


def all_strings(value) -> list[str]:
    """Every string inside a Parquet value: nested lists, structs, maps; JSON text parsed too."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
            if v[:1] in "[{":
                try:
                    stack.append(json.loads(v))
                except ValueError:
                    pass
        elif isinstance(v, bytes):
            out.append(v.decode("utf-8", "replace"))
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return out


def warehouse_strings(warehouse) -> list[str]:
    out = []
    for path in sorted(warehouse.rglob("*.parquet")):
        table = pq.read_table(path)
        for column in table.columns:
            out += all_strings(column.to_pylist())
        metadata = pq.read_metadata(path).metadata or {}
        out += [v.decode("utf-8", "replace") for v in metadata.values()]
    return out


def assert_no_secret(where: str, texts, s: dict[str, str]) -> None:
    blob = "\n".join(texts)
    for name, value in s.items():
        assert value not in blob, f"{name} found in {where}"


def folder_bytes(folder) -> bytes:
    out = b""
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    out += f.read()
            except OSError:
                pass
    return out


@pytest.mark.slow
def test_no_secret_reaches_any_file_or_record(capture: Capture, capfd):
    s = secret_set()
    write_env(capture.home, s)
    write_v019_store(capture, s)
    write_v022_profile_store(capture, s)
    instance = dg.DagsterInstance.local_temp(str(capture.dagster_home))
    try:
        result = capture.materialize(DAY, instance=instance)
        assert result.success
        # the rows are there, redacted in place: the text around each secret is kept
        strings = warehouse_strings(capture.warehouse)
        assert any("please use these:" in t and "[REDACTED:" in t for t in strings)
        assert_no_secret("the warehouse's Parquet files", strings, s)
        for dataset in DATASETS:
            assert list((capture.warehouse / dataset).rglob("*.parquet")), dataset
        # tool-call arguments stay JSON, with their keys
        messages = pq.read_table(next((capture.warehouse / "hermes_messages").rglob("*.parquet"))).to_pylist()
        calls = [json.loads(m["tool_calls"]) for m in messages if m["tool_calls"]]
        args = [json.loads(c["function"]["arguments"]) for call in calls for c in call]
        assert {"command"} in [set(a) for a in args]
        assert any(a.get("command", "").startswith("export OPENAI_API_KEY=[REDACTED:") for a in args)
        # ids, counts untouched
        sessions = {
            r["id"]: r
            for r in pq.read_table(next((capture.warehouse / "hermes_sessions").rglob("*.parquet"))).to_pylist()
        }
        assert set(sessions) == {"s-secret", "p-secret"}
        assert sessions["s-secret"]["message_count"] == 5
        # reported by kind, never by value
        project = next(
            e.event_specific_data.metadata
            for e in result.all_events
            if e.event_type_value == "STEP_OUTPUT" and e.step_key.endswith("project_rows")
        )
        counts = project["hermes_messages.secrets_redacted"].value
        kinds = {rule_matcher().kind_of(s[maker]) or kind for maker, kind in FORMAT_KINDS}  # the most specific
        assert kinds <= set(counts) and counts["hermes_env"] >= 2
        assert project["hermes_sessions.secrets_redacted"].value
        # the key: private, in the Dagster instance's folder, outside the warehouse
        key = capture.dagster_home / "redaction.key"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert not list(capture.warehouse.rglob("redaction.key"))
        # nothing in Dagster's records (event log, run storage, compute logs) or the console
        instance.dispose()
        raw = folder_bytes(capture.dagster_home)
        assert raw, "the instance wrote nothing"
        for name, value in s.items():
            assert value.encode() not in raw, f"{name} found in DAGSTER_HOME"
        out, err = capfd.readouterr()
        assert_no_secret("the console", [out, err], s)
        # the Hermes files are untouched (never written)
        assert s["env_only"] in (capture.home / ".env").read_text()
    finally:
        instance.dispose()


@pytest.mark.slow
def test_redaction_off_copies_cells_as_stored(capture: Capture, monkeypatch):
    monkeypatch.setenv("HERMES_ASSETS_REDACT_SECRETS", "off")
    s = secret_set()
    write_env(capture.home, s)
    write_v019_store(capture, s)
    assert capture.materialize(DAY).success
    blob = "\n".join(warehouse_strings(capture.warehouse))
    assert s["openai_api_key"] in blob and s["env_only"] in blob
    assert not MARKER.search(blob)


@pytest.mark.slow
def test_an_existing_warehouse_is_redacted_in_place_and_then_left_alone(capture: Capture, monkeypatch, tmp_path):
    """Files written before redaction (here: with it off) are redacted by the next run, rows
    kept after Hermes deleted their session included; the run after that changes no byte."""
    s = secret_set()
    write_env(capture.home, s)
    write_v019_store(capture, s)
    with HermesWriter(capture.store, home=capture.home, start_s=START_S + 3600) as w:
        sid = w.session("s-gone", "cli")
        w.msg(sid, "user", "old paste " + s["stripe_key"])
        w.end(sid)
    monkeypatch.setenv("HERMES_ASSETS_REDACT_SECRETS", "off")
    assert capture.materialize(DAY).success
    assert s["stripe_key"] in "\n".join(warehouse_strings(capture.warehouse))
    # Hermes deletes the session: its rows are kept (source_deleted), found nowhere else
    with HermesWriter(capture.store, home=capture.home) as w:
        w.delete_session("s-gone")
    monkeypatch.setenv("HERMES_ASSETS_REDACT_SECRETS", "on")
    instance = dg.DagsterInstance.local_temp(str(capture.dagster_home))
    try:
        result = capture.materialize(DAY, instance=instance)
        assert result.success
        strings = warehouse_strings(capture.warehouse)
        assert_no_secret("the warehouse after the upgrade run", strings, s)
        kept = [
            r
            for r in pq.read_table(next((capture.warehouse / "hermes_messages").rglob("*.parquet"))).to_pylist()
            if r["session_id"] == "s-gone"
        ]
        assert kept and all(r["source_deleted"] for r in kept)
        kind = rule_matcher().kind_of(s["stripe_key"]) or "stripe_key"
        assert kept[0]["content"].startswith(f"old paste [REDACTED:{kind}:")
        project = next(
            e.event_specific_data.metadata
            for e in result.all_events
            if e.event_type_value == "STEP_OUTPUT" and e.step_key.endswith("project_rows")
        )
        assert project["cells_redacted_again"].value["hermes_messages"] >= 1
        assert set(project["files_redacted_again"].value) == set(DATASETS)
        for path in capture.warehouse.rglob("*.parquet"):
            meta = pq.read_metadata(path).metadata
            assert meta[VERSION_KEY].decode().startswith("betterleaks-")
        before = part_files(capture.warehouse)
        assert capture.materialize(DAY, instance=instance).success
        assert part_files(capture.warehouse) == before
    finally:
        instance.dispose()


def test_settings_say_on_or_off(monkeypatch, tmp_path):
    from hermes_assets.defs import settings
    from hermes_assets.lib.basics.errors import ConfigurationError

    base = {"HERMES_ASSETS_WAREHOUSE": str(tmp_path / "wh"), "DAGSTER_HOME": str(tmp_path / "dh")}
    assert settings.load(base).redact_secrets is True
    assert settings.load(base).redaction_key == str(tmp_path / "dh" / "redaction.key")
    assert settings.load({**base, "HERMES_ASSETS_REDACT_SECRETS": "off"}).redact_secrets is False
    with pytest.raises(ConfigurationError, match="HERMES_ASSETS_REDACT_SECRETS='maybe' is not on or off"):
        settings.load({**base, "HERMES_ASSETS_REDACT_SECRETS": "maybe"})
    key = tmp_path / "shared.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)
    with pytest.raises(ConfigurationError, match="can be read by other users"):
        settings.check({**base, "HERMES_ASSETS_REDACTION_KEY": str(key)})
    key.chmod(0o600)
    assert settings.check({**base, "HERMES_ASSETS_REDACTION_KEY": str(key)}).redaction_key == str(key)
    # an empty or short key is refused in one line naming the file: a marker could be confirmed by trying keys
    for size in (0, 16, 31):
        key.write_bytes(os.urandom(size))
        with pytest.raises(ConfigurationError, match=f"HERMES_ASSETS_REDACTION_KEY='{key}' holds {size} bytes") as e:
            settings.check({**base, "HERMES_ASSETS_REDACTION_KEY": str(key)})
        assert "\n" not in str(e.value)
