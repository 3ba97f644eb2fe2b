"""What the redaction tests share: a store written by Hermes's real writer, holding fake keys."""

from __future__ import annotations

import pytest

from tests.lib.redaction.test_redactor import fake
from tests.support.hermes_writer import START_S, HermesWriter, openai_call


@pytest.fixture
def secret_store(tmp_path):
    keys = {"github": fake("github_token"), "openai": fake("openai_api_key")}
    db = tmp_path / "home" / "state.db"
    with HermesWriter(db, home=tmp_path / "home", start_s=START_S) as w:
        sid = w.session("s1", "cli", cwd="/work/a")
        w.msg(sid, "user", "my key " + keys["github"])
        w.msg(
            sid,
            "assistant",
            "ok",
            tool_calls=[openai_call("c1", "terminal", {"command": "export OPENAI_API_KEY=" + keys["openai"]})],
        )
        w.end(sid)
        other = w.session("s2", "cli", cwd="/work/b")
        w.msg(other, "user", "nothing secret here")
        w.end(other)
    return db, keys
