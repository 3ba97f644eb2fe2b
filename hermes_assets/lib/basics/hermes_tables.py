"""Hermes's own tables as this project reads them: the columns of schema 31's ``sessions``,
``messages`` and ``session_model_usage`` with their SQLite types and what an absent column
reads as, the columns schemas 23-31 added, and the TEXT columns that hold JSON. The reader
selects by these lists (:mod:`~hermes_assets.lib.source.state_db`); the raw datasets'
Arrow schemas are built from them (:mod:`~hermes_assets.lib.basics.schemas`).

The lists are those of Hermes v0.22.2 (schema v31), in the order of a fresh v31 store, with
their SQLite declared types and the default a column reads as when an older store lacks it
(SPEC §1): a v22 column its v22 default, a column added after v22 NULL (D22), so a store
written by hermes-agent 0.19 reads exactly as it did before the new columns existed."""

from __future__ import annotations

#: (name, SQLite type, default when the column is absent) for v31 ``sessions``.
SESSION_COLUMNS: tuple[tuple[str, str, object], ...] = (
    ("id", "TEXT", None),
    ("source", "TEXT", None),
    ("created_source", "TEXT", None),
    ("user_id", "TEXT", None),
    ("session_key", "TEXT", None),
    ("chat_id", "TEXT", None),
    ("chat_type", "TEXT", None),
    ("thread_id", "TEXT", None),
    ("display_name", "TEXT", None),
    ("origin_json", "TEXT", None),
    ("expiry_finalized", "INTEGER", 0),
    ("model", "TEXT", None),
    ("model_config", "TEXT", None),
    ("system_prompt", "TEXT", None),
    ("system_prompt_hash", "TEXT", None),
    ("parent_session_id", "TEXT", None),
    ("started_at", "REAL", None),
    ("ended_at", "REAL", None),
    ("end_reason", "TEXT", None),
    ("message_count", "INTEGER", 0),
    ("tool_call_count", "INTEGER", 0),
    ("input_tokens", "INTEGER", 0),
    ("output_tokens", "INTEGER", 0),
    ("cache_read_tokens", "INTEGER", 0),
    ("cache_write_tokens", "INTEGER", 0),
    ("reasoning_tokens", "INTEGER", 0),
    ("cwd", "TEXT", None),
    ("git_branch", "TEXT", None),
    ("git_repo_root", "TEXT", None),
    ("git_metadata_generation", "INTEGER", None),
    ("billing_provider", "TEXT", None),
    ("billing_base_url", "TEXT", None),
    ("billing_mode", "TEXT", None),
    ("estimated_cost_usd", "REAL", None),
    ("actual_cost_usd", "REAL", None),
    ("cost_status", "TEXT", None),
    ("cost_source", "TEXT", None),
    ("pricing_version", "TEXT", None),
    ("title", "TEXT", None),
    ("title_source", "TEXT", None),
    ("last_activity_at", "REAL", None),
    ("last_activity_description", "TEXT", None),
    ("last_activity_provenance", "TEXT", None),
    ("api_call_count", "INTEGER", 0),
    ("handoff_state", "TEXT", None),
    ("handoff_platform", "TEXT", None),
    ("handoff_error", "TEXT", None),
    ("compression_failure_cooldown_until", "REAL", None),
    ("compression_failure_error", "TEXT", None),
    ("compression_fallback_streak", "INTEGER", 0),
    ("compression_ineffective_count", "INTEGER", None),
    ("compression_recovery_deadline", "REAL", None),
    ("compression_overload_streak", "INTEGER", None),
    ("profile_name", "TEXT", None),
    ("transport_profile", "TEXT", None),
    ("rewind_count", "INTEGER", 0),
    ("archived", "INTEGER", 0),
    ("auto_archived", "INTEGER", None),
    ("pinned", "INTEGER", None),
    ("hidden", "INTEGER", None),
    ("last_read_at", "REAL", None),
    ("tool_names", "TEXT", None),
)

#: (name, SQLite type, default when absent) for v31 ``messages``.
MESSAGE_COLUMNS: tuple[tuple[str, str, object], ...] = (
    ("id", "INTEGER", None),
    ("session_id", "TEXT", None),
    ("role", "TEXT", None),
    ("content", "TEXT", None),
    ("tool_call_id", "TEXT", None),
    ("tool_calls", "TEXT", None),
    ("tool_name", "TEXT", None),
    ("effect_disposition", "TEXT", None),
    ("timestamp", "REAL", None),
    ("token_count", "INTEGER", None),
    ("finish_reason", "TEXT", None),
    ("reasoning", "TEXT", None),
    ("reasoning_content", "TEXT", None),
    ("reasoning_details", "TEXT", None),
    ("codex_reasoning_items", "TEXT", None),
    ("codex_message_items", "TEXT", None),
    ("platform_message_id", "TEXT", None),
    ("observed", "INTEGER", 0),
    ("_compressed_summary", "INTEGER", None),
    ("active", "INTEGER", 1),
    ("compacted", "INTEGER", 0),
    ("api_content", "TEXT", None),
    ("display_kind", "TEXT", None),
    ("display_metadata", "TEXT", None),
    ("display_identity", "BLOB", None),
    ("display_order", "INTEGER", None),
    ("message_uid", "TEXT", None),
    ("absorbed_message_uids", "TEXT", None),
    ("tool_call_uids", "TEXT", None),
    ("tool_call_uid", "TEXT", None),
)

#: the columns schema 23-31 added (hermes-agent 0.19.0 is schema 22)
V23_SESSION_COLUMNS = frozenset(
    {
        "created_source",
        "system_prompt_hash",
        "git_metadata_generation",
        "title_source",
        "last_activity_at",
        "last_activity_description",
        "last_activity_provenance",
        "compression_ineffective_count",
        "compression_recovery_deadline",
        "compression_overload_streak",
        "transport_profile",
        "auto_archived",
        "pinned",
        "hidden",
        "last_read_at",
        "tool_names",
    }
)
V23_MESSAGE_COLUMNS = frozenset(
    {
        "_compressed_summary",
        "display_kind",
        "display_metadata",
        "display_identity",
        "display_order",
        "message_uid",
        "absorbed_message_uids",
        "tool_call_uids",
        "tool_call_uid",
    }
)
#: TEXT columns of Hermes that hold JSON, kept as the JSON type (SPEC §4)
JSON_TEXT_COLUMNS = frozenset({"display_metadata", "absorbed_message_uids", "tool_call_uids"})

#: v22 ``session_model_usage`` (absent before 0.19: no rows).
USAGE_COLUMNS: tuple[tuple[str, str, object], ...] = (
    ("session_id", "TEXT", None),
    ("model", "TEXT", None),
    ("billing_provider", "TEXT", ""),
    ("billing_base_url", "TEXT", ""),
    ("billing_mode", "TEXT", ""),
    ("task", "TEXT", ""),
    ("api_call_count", "INTEGER", 0),
    ("input_tokens", "INTEGER", 0),
    ("output_tokens", "INTEGER", 0),
    ("cache_read_tokens", "INTEGER", 0),
    ("cache_write_tokens", "INTEGER", 0),
    ("reasoning_tokens", "INTEGER", 0),
    ("estimated_cost_usd", "REAL", 0.0),
    ("actual_cost_usd", "REAL", 0.0),
    ("cost_status", "TEXT", None),
    ("cost_source", "TEXT", None),
    ("first_seen", "REAL", None),
    ("last_seen", "REAL", None),
)
