"""A small live Hermes for the end-to-end test: writes through the real ``SessionDB``, real clock.

Run as a process (``python -m tests.sensor.live_hermes --home H --duration S``)
with ``HERMES_HOME`` set by the caller. A conversation turn every
``--interval`` seconds: new sessions, user/assistant messages with token
accounting, and one session ended halfway. Every committed write is logged to
``--log`` as a JSON line with the wall time right after the commit returned,
so the test can measure how long each row took to reach the warehouse.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from datetime import UTC, datetime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", required=True)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    os.environ["HERMES_HOME"] = args.home
    import hermes_state  # reads HERMES_HOME at import

    db = hermes_state.SessionDB()
    log = open(args.log, "a", encoding="utf-8")

    def emit(**kw):
        kw["t"] = time.time()
        log.write(json.dumps(kw) + "\n")
        log.flush()

    def new_session(source: str) -> str:
        sid = f"{datetime.now(UTC):%Y%m%d_%H%M%S}_{uuid.uuid4().hex[:6]}"
        db.create_session(
            sid,
            source,
            model="anthropic/claude-sonnet-4.6",
            cwd="/home/dev/src/webapp",
            system_prompt="You are Hermes (e2e).",
        )
        emit(op="create_session", session_id=sid)
        return sid

    stop_at = time.time() + args.duration
    sessions = [new_session("cli")]
    turn = 0
    ended = False
    while time.time() < stop_at:
        turn += 1
        if turn % 12 == 0:
            sessions.append(new_session("tui" if turn % 24 else "cli"))
        sid = sessions[turn % len(sessions)]
        role = "user" if turn % 2 else "assistant"
        if role == "assistant":
            db.update_token_counts(
                sid,
                input_tokens=100 + turn,
                output_tokens=20 + turn,
                model="anthropic/claude-sonnet-4.6",
                billing_provider="openrouter",
                billing_base_url="https://openrouter.ai/api/v1",
                api_call_count=1,
            )
        finish = "stop" if role == "assistant" else None
        mid = db.append_message(sid, role, f"{role} turn {turn}", finish_reason=finish)
        emit(op="append_message", session_id=sid, mid=mid, role=role)
        if not ended and time.time() > stop_at - args.duration / 2 and len(sessions) > 1:
            db.end_session(sessions[0], "cli_close")
            emit(op="end_session", session_id=sessions[0])
            sessions.pop(0)
            ended = True
        time.sleep(args.interval)
    db.close()
    log.close()


if __name__ == "__main__":
    main()
