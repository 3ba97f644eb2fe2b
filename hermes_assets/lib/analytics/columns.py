"""What each column of each analytics dataset holds, and how it stands to Hermes's own report.

One text per column, shown on the asset's page (Dagster's column schema) and in
the contract's tables (``tools/gen_docs_tables.py``). A column that
``hermes insights`` also gives says so: **= Hermes** (it equals Hermes's
figure), or **differs from Hermes** and where Hermes's own figure is (a
``hermes_*`` column beside it); docs/contract.md §11 says why.
"""

from __future__ import annotations

_DAY = "The UTC day the sessions started (the partition)."
_TOKEN = "tokens of every model the sessions used (their usage rows, and their own counters beyond them)"
_SAME_TOKENS = "= Hermes (per model, and the overview's total)."
_EST = (
    "Hermes's stored estimates in USD (the usage rows', and the sessions' own beyond them), to the micro-dollar; "
    "NULL where no session had one. Differs from Hermes, whose report prices a usage row without a cost status "
    "itself: `hermes_cost_usd`."
)
_ACTUAL = (
    "Costs a provider reported in USD (usage rows, and the sessions' own beyond them); `0.0` usually means none "
    "was reported; NULL where no session had one. = Hermes (per model)."
)
_HERMES_COST = (
    "The cost Hermes's report gives: a usage row's stored estimate when it has a cost status or source, else "
    "Hermes's own price of its tokens (its v0.22.2 table; a route it prices from a list fetched online counts 0, "
    "as in a report made offline), plus the sessions' own estimate beyond their rows. = Hermes."
)
_HERMES_MESSAGES = "The sessions' own `message_count` counters. = Hermes (its platforms' and overview's messages)."
_HERMES_TOOL_CALLS = (
    "The sessions' own `tool_call_count` counters. = Hermes (its platforms' and overview's tool calls)."
)
_MESSAGES = (
    "Stored messages of the sessions (rewound and compacted ones included, `session_meta` rows not), each logical "
    "message once. Differs from Hermes, which counts the sessions' own counters: `hermes_messages`."
)
_TOOL_CALLS = (
    "Tool calls in the sessions' messages (canonical `tool_call` parts, each logical call once). Differs from "
    "Hermes, which counts the sessions' own counters: `hermes_tool_calls`."
)


def _tokens(scope: str, same: str) -> dict[str, str]:
    return {
        "api_calls": f"API calls of {scope} (usage rows, and the sessions' own counters beyond them). {same}",
        "input_tokens": f"Input {_TOKEN} (Hermes's input excludes cache reads and writes). {same}",
        "output_tokens": f"Output {_TOKEN} (reasoning included). {same}",
        "cache_read_tokens": f"Cache-read {_TOKEN}. {same}",
        "cache_write_tokens": f"Cache-write {_TOKEN}. {same}",
        "reasoning_tokens": (
            f"Reasoning {_TOKEN}, part of the output. = Hermes, except a session's own reasoning counter beyond its "
            "usage rows, which counts here and not in Hermes's report (its sessions without usage rows show none)."
        ),
        "total_tokens": f"input + cache read + cache write + output (Hermes's own total). {same}",
    }


DESCRIPTIONS: dict[str, dict[str, str]] = {
    "hermes_daily_usage": {
        "day": _DAY,
        "model": (
            "The model as Hermes recorded it; NULL: none (Hermes: `unknown`). Hermes's report shows a model's last "
            "path segment (`anthropic/claude-x` as `claude-x`), one line for the models that share it."
        ),
        "sessions": (
            "Sessions that used the model (a usage row of it) or have it as their own model; a session can count "
            "under several. Differs from Hermes: `hermes_sessions`."
        ),
        "messages": (
            "Stored messages (rewound and compacted ones included, `session_meta` rows not) of the sessions whose "
            "own model this is, each logical message once. Not in Hermes's report per model."
        ),
        "tool_calls": (
            "Tool calls in the messages (canonical `tool_call` parts, each logical call once) of the sessions whose "
            "own model this is. Differs from Hermes, which counts the sessions' `tool_call_count`: "
            "`hermes_tool_calls`."
        ),
        **_tokens("the model", _SAME_TOKENS),
        "estimated_cost_usd": _EST,
        "actual_cost_usd": _ACTUAL,
        "hermes_sessions": (
            "The sessions Hermes's report counts under the model: those with a usage row of it, and those whose "
            "own counters hold more than their rows, under their own model. = Hermes."
        ),
        "hermes_tool_calls": "Each session's `tool_call_count` under its own model, as Hermes's report counts. = Hermes.",
        "hermes_cost_usd": _HERMES_COST,
    },
    "hermes_daily_tools": {
        "day": _DAY,
        "tool_name": "The tool (NULL: a call or result that names none).",
        "calls": (
            "Calls of the tool (canonical `tool_call` parts, each logical call once). Differs from Hermes: "
            "`hermes_calls`."
        ),
        "results": "Results of the tool (canonical `tool_result` parts, each once). Not in Hermes's report.",
        "error_results": (
            "Results Hermes shows as failed (`is_error`, else Hermes's own rule on the result's text). Not in "
            "Hermes's report."
        ),
        "sessions": "Sessions that called the tool or got its results. Not in Hermes's report.",
        "hermes_calls": (
            "The calls Hermes's report counts: per session, the larger of the calls its assistant messages name and "
            "its tool messages named so, over every stored row (copies, rewound and compacted rows included). "
            "= Hermes (v0.22; 0.19 took the larger over the whole report, not per session)."
        ),
    },
    "hermes_daily_channels": {
        "day": _DAY,
        "channel": (
            "The sessions' `source`: `cli`, `tui`, `cron`, `subagent`, or a messaging platform (Hermes's "
            "platform); NULL: none (Hermes: `unknown`)."
        ),
        "sessions": "Sessions started through the channel. = Hermes (its platforms' sessions).",
        "messages": _MESSAGES,
        "hermes_messages": _HERMES_MESSAGES,
        "tool_calls": _TOOL_CALLS,
        "hermes_tool_calls": _HERMES_TOOL_CALLS,
        **_tokens(
            "the sessions",
            "Adds up, over channels, to `hermes_daily_usage` and to Hermes's overview; differs from Hermes's "
            "platforms, which count the sessions' own counters only (their main loop, without auxiliary tasks): "
            "`hermes_total_tokens`.",
        ),
        "hermes_total_tokens": (
            "The total of the sessions' own token counters (input + cache read + cache write + output). = Hermes "
            "(its platforms' tokens)."
        ),
        "estimated_cost_usd": _EST,
        "actual_cost_usd": _ACTUAL,
        "hermes_cost_usd": _HERMES_COST + " Over channels: Hermes's overview cost.",
        "ended_sessions": "Sessions that ended after they started.",
        "session_seconds": (
            "Their time from start to end, in seconds (to the millisecond). = Hermes (its overview's active time; "
            "divided by `ended_sessions`: its average session)."
        ),
    },
    "hermes_daily_skills": {
        "day": _DAY,
        "skill": "The skill, as the call named it (`skill_view` and `skill_manage` arguments' `name`).",
        "loads": (
            "`skill_view` calls naming it in the stored assistant messages, every stored row (copies, rewound and "
            "compacted rows included). = Hermes (its loads)."
        ),
        "edits": "`skill_manage` calls naming it, counted the same way. = Hermes (its edits).",
        "actions": "loads + edits. = Hermes.",
        "sessions": "Sessions that loaded or edited it. Not in Hermes's report.",
        "last_used_at": "When the last message that used it was stored (UTC, to the millisecond). = Hermes.",
    },
    "hermes_activity": {
        "day": _DAY,
        "weekday": "The day's ISO weekday: 1 Monday ... 7 Sunday.",
        "weekday_name": "`Mon` ... `Sun`.",
        "hour": "The hour of the day (UTC, 0-23) in which the sessions started.",
        "sessions": (
            "Sessions started in that hour. = Hermes, by weekday and by hour, when its report runs in UTC (it uses "
            "the machine's time zone)."
        ),
        "total_tokens": (
            "Their tokens, input + cache read + cache write + output, every model they used (as "
            "`hermes_daily_usage`). Not in Hermes's report."
        ),
    },
    "hermes_top_sessions": {
        "day": _DAY,
        "ranking": (
            "What the sessions are ranked by: `tokens` (`total_tokens`), `cost` (`estimated_cost_usd`), and "
            "Hermes's notable sessions by its own measures: `duration` (Longest session), `hermes_messages` (Most "
            "messages), `hermes_tokens` (Most tokens), `hermes_tool_calls` (Most tool calls)."
        ),
        "rank": (
            "1 = the largest that day (ties: the later start first, as Hermes picks); the day's top 10 of each "
            "ranking, a measure above zero only."
        ),
        "host": "The host that captured the session.",
        "store_label": "The store label (`''`: the default store).",
        "session_id": "Hermes's session id (`hermes_sessions.id`).",
        "title": "The session's title, redacted like every text cell.",
        "channel": "The session's `source` (as `hermes_daily_channels`).",
        "model": "The session's own model.",
        "started_at": "When it started (UTC).",
        "ended_at": "When it ended (UTC); NULL while open.",
        "duration_seconds": (
            "From start to end, in seconds (to the millisecond); NULL while open. = Hermes (Longest session)."
        ),
        "messages": _MESSAGES.replace("of the sessions", "of the session"),
        "hermes_messages": "Its own `message_count`. = Hermes (Most messages).",
        "tool_calls": _TOOL_CALLS.replace("the sessions'", "the session's"),
        "hermes_tool_calls": "Its own `tool_call_count`. = Hermes (Most tool calls).",
        "total_tokens": "Its tokens, input + cache read + cache write + output, every model it used.",
        "hermes_tokens": (
            "Input + output of its own token counters. = Hermes (Most tokens, which leaves out cache reads and "
            "writes and auxiliary tasks)."
        ),
        "estimated_cost_usd": "Its stored estimate in USD (as `hermes_daily_usage`); NULL: none.",
        "hermes_cost_usd": "The cost Hermes's report would give it (as `hermes_daily_usage.hermes_cost_usd`).",
    },
}
