"""Arrow schemas of every dataset: the three captured (SPEC §3, §4, §5.1; the raw ones built
from Hermes's own columns, :mod:`~hermes_assets.lib.basics.hermes_tables`), the analytics and
the secrets' datasets.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from hermes_assets.lib.basics.hermes_tables import JSON_TEXT_COLUMNS, MESSAGE_COLUMNS, SESSION_COLUMNS

TS = pa.timestamp("ms", tz="UTC")
JSON = pa.json_(pa.utf8())

_SQL_TO_ARROW = {"INTEGER": pa.int64(), "REAL": pa.float64(), "TEXT": pa.string(), "BLOB": pa.binary()}

_TIMESTAMP_COLUMNS = {"started_at", "ended_at", "timestamp"}
_REQUIRED_RAW = {"id"}


def _raw_fields(columns: tuple[tuple[str, str, object], ...]) -> list[pa.Field]:
    fields = []
    for name, sql_type, _ in columns:
        arrow_type = (
            TS if name in _TIMESTAMP_COLUMNS else JSON if name in JSON_TEXT_COLUMNS else _SQL_TO_ARROW[sql_type]
        )
        fields.append(pa.field(name, arrow_type, nullable=name not in _REQUIRED_RAW))
    return fields


_PROVENANCE = [
    pa.field("store", pa.string(), nullable=False),
    pa.field("store_label", pa.string(), nullable=False),
    pa.field("profile", pa.string()),
    # the host that captured the row (several hosts can write one warehouse, SPEC §2)
    pa.field("host", pa.string(), nullable=False),
]

#: D13/D15: the row's source is gone from the store; which generation of a reused id the row
#: is (1 unless a restored store handed the id to another message or session); and whether
#: it was replaced by a later generation
_RETENTION = [
    pa.field("source_deleted", pa.bool_(), nullable=False),
    pa.field("generation", pa.int32(), nullable=False),
    pa.field("replaced", pa.bool_(), nullable=False),
]
#: columns a file written by an earlier version may lack, and what they read as (any other
#: column such a file lacks reads as NULL: the schema-31 columns, ``copy_of``, ``extra_columns`` ...)
ADDED_COLUMNS = {"generation": 1, "replaced": False}
#: D22: the store's columns this contract does not name, per row (``{name: value}``, BLOB as base64)
_EXTRA = pa.field("extra_columns", JSON)

HERMES_SESSIONS = pa.schema(
    _raw_fields(SESSION_COLUMNS)
    + _PROVENANCE
    + [
        pa.field("scope_path", pa.string()),
        pa.field("policy_class", pa.string(), nullable=False),
        pa.field("usage_by_model", JSON),
        _EXTRA,
        *_RETENTION,
        pa.field("day", pa.string(), nullable=False),
    ]
)

HERMES_MESSAGES = pa.schema(
    _raw_fields(MESSAGE_COLUMNS)
    + [
        pa.field("content_text", pa.string()),
        pa.field("content_json", JSON),
        # D20: the first generation of the logical message this row is a copy of, and whether an
        # inactive row has a later active generation (NULL: the store predates schema 23)
        pa.field("copy_of", pa.string()),
        pa.field("superseded", pa.bool_()),
        _EXTRA,
    ]
    + _PROVENANCE
    + [
        *_RETENTION,
        pa.field("day", pa.string(), nullable=False),
    ]
)

S, I32, B = pa.string(), pa.int32(), pa.bool_()

#: (name, type, required) of ``ai_gateway_messages`` schema version 7, in order.
GATEWAY_COLUMNS: tuple[tuple[str, pa.DataType, bool], ...] = (
    ("gateway_id", S, True),
    ("schema_version", I32, True),
    ("session_id", S, True),
    ("conversation_id", S, False),
    ("user_id", S, False),
    ("provider", S, True),
    ("model", S, False),
    ("system_text", S, False),
    ("tools", JSON, False),
    ("conversation_started_at", TS, True),
    ("conversation_source", S, False),
    ("client_name", S, False),
    ("cwd", S, False),
    ("git_branch", S, False),
    ("git_remote", S, False),
    ("head_sha", S, False),
    ("repo_root", S, False),
    ("client_version", S, False),
    ("entrypoint", S, False),
    ("user_type", S, False),
    ("permission_mode", S, False),
    ("is_sidechain", B, False),
    ("agent_id", S, False),
    ("parent_thread_id", S, False),
    ("message_id", S, True),
    ("previous_message_id", JSON, False),
    ("provider_uuid", S, False),
    ("parent_uuid", S, False),
    ("logical_parent_uuid", S, False),
    ("source_tool_assistant_uuid", S, False),
    ("request_id", S, False),
    ("prompt_id", S, False),
    ("message_index", I32, True),
    ("message_created_at", TS, True),
    ("role", S, True),
    ("part_id", S, True),
    ("part_index", I32, True),
    ("part_type", S, True),
    ("provider_type", S, False),
    ("provider_subtype", S, False),
    ("content_text", S, False),
    ("tool_name", S, False),
    ("tool_call_id", S, False),
    ("tool_args", JSON, False),
    ("caller_type", S, False),
    ("tool_result_for", S, False),
    ("thinking_signature", S, False),
    ("attachment_type", S, False),
    ("hook_event", S, False),
    ("is_error", B, False),
    ("is_compact_summary", B, False),
    ("compact_metadata", JSON, False),
    ("status", JSON, False),
    ("attributes", JSON, False),
    ("raw_frame", JSON, False),
    ("date", S, True),
    ("host", S, True),
)

AI_GATEWAY_MESSAGES = pa.schema([pa.field(name, typ, nullable=not required) for name, typ, required in GATEWAY_COLUMNS])

REQUIRED_GATEWAY_COLUMNS = tuple(name for name, _, required in GATEWAY_COLUMNS if required)


SESSIONS = "hermes_sessions"
MESSAGES = "hermes_messages"
GATEWAY = "ai_gateway_messages_hermes"
#: the three capture datasets, in the order runs report them
CAPTURE_DATASETS = (SESSIONS, MESSAGES, GATEWAY)


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: its Arrow schema, the columns that identify a row, and the order of its files."""

    name: str
    schema: pa.Schema
    #: the columns whose values identify one row (SPEC §6: a re-run replaces it, never adds one)
    key: tuple[str, ...]
    #: the columns a partition file is ordered by
    sort_keys: tuple[str, ...]


def _specs(*specs: DatasetSpec) -> dict[str, DatasetSpec]:
    return {spec.name: spec for spec in specs}


#: the captured datasets, by name
DATASETS = _specs(
    DatasetSpec(SESSIONS, HERMES_SESSIONS, ("store", "id", "generation"), ("store", "id", "generation")),
    DatasetSpec(
        MESSAGES,
        HERMES_MESSAGES,
        ("store", "session_id", "id", "generation"),
        ("store", "session_id", "id", "generation"),
    ),
    DatasetSpec(GATEWAY, AI_GATEWAY_MESSAGES, ("part_id",), ("session_id", "message_index", "part_id")),
)

# --------------------------------------------------------------------------
# the analytics layer (SPEC §11): derived datasets, same layout and file rules
# --------------------------------------------------------------------------

I64, F64 = pa.int64(), pa.float64()


def _columns(*fields: tuple[str, pa.DataType, bool]) -> pa.Schema:
    """A derived dataset's schema from (name, type, may be NULL)."""
    return pa.schema([pa.field(name, typ, nullable=nullable) for name, typ, nullable in fields])


#: API calls and tokens, as every table of totals counts them
_TOKEN_COUNTS = (
    ("api_calls", I64, False),
    ("input_tokens", I64, False),
    ("output_tokens", I64, False),
    ("cache_read_tokens", I64, False),
    ("cache_write_tokens", I64, False),
    ("reasoning_tokens", I64, False),
    ("total_tokens", I64, False),
)
_COSTS = (("estimated_cost_usd", F64, True), ("actual_cost_usd", F64, True))

HERMES_DAILY_USAGE = _columns(
    ("day", S, False),
    ("model", S, True),
    ("sessions", I64, False),
    ("messages", I64, False),
    ("tool_calls", I64, False),
    *_TOKEN_COUNTS,
    *_COSTS,
    # Hermes's own figures where they differ from ours (docs/contract.md §11), after ours
    ("hermes_sessions", I64, False),
    ("hermes_tool_calls", I64, False),
    ("hermes_cost_usd", F64, False),
)

HERMES_DAILY_TOOLS = _columns(
    ("day", S, False),
    ("tool_name", S, True),
    ("calls", I64, False),
    ("results", I64, False),
    ("error_results", I64, False),
    ("sessions", I64, False),
    ("hermes_calls", I64, False),
)

HERMES_DAILY_CHANNELS = _columns(
    ("day", S, False),
    ("channel", S, True),
    ("sessions", I64, False),
    ("messages", I64, False),
    ("hermes_messages", I64, False),
    ("tool_calls", I64, False),
    ("hermes_tool_calls", I64, False),
    *_TOKEN_COUNTS,
    ("hermes_total_tokens", I64, False),
    *_COSTS,
    ("hermes_cost_usd", F64, False),
    ("ended_sessions", I64, False),
    ("session_seconds", F64, False),
)

HERMES_DAILY_SKILLS = _columns(
    ("day", S, False),
    ("skill", S, False),
    ("loads", I64, False),
    ("edits", I64, False),
    ("actions", I64, False),
    ("sessions", I64, False),
    ("last_used_at", TS, True),
)

HERMES_ACTIVITY = _columns(
    ("day", S, False),
    ("weekday", I32, False),
    ("weekday_name", S, False),
    ("hour", I32, False),
    ("sessions", I64, False),
    ("total_tokens", I64, False),
)

HERMES_TOP_SESSIONS = _columns(
    ("day", S, False),
    ("ranking", S, False),
    ("rank", I32, False),
    ("host", S, False),
    ("store_label", S, False),
    ("session_id", S, False),
    ("title", S, True),
    ("channel", S, True),
    ("model", S, True),
    ("started_at", TS, True),
    ("ended_at", TS, True),
    ("duration_seconds", F64, True),
    ("messages", I64, False),
    ("hermes_messages", I64, False),
    ("tool_calls", I64, False),
    ("hermes_tool_calls", I64, False),
    ("total_tokens", I64, False),
    ("hermes_tokens", I64, False),
    ("estimated_cost_usd", F64, True),
    ("hermes_cost_usd", F64, False),
)

#: the derived datasets, by name (like :data:`DATASETS`)
ANALYTICS = _specs(
    DatasetSpec("hermes_daily_usage", HERMES_DAILY_USAGE, ("day", "model"), ("day", "model")),
    DatasetSpec("hermes_daily_tools", HERMES_DAILY_TOOLS, ("day", "tool_name"), ("day", "tool_name")),
    DatasetSpec("hermes_daily_channels", HERMES_DAILY_CHANNELS, ("day", "channel"), ("day", "channel")),
    DatasetSpec("hermes_daily_skills", HERMES_DAILY_SKILLS, ("day", "skill"), ("day", "skill")),
    DatasetSpec("hermes_activity", HERMES_ACTIVITY, ("day", "hour"), ("day", "hour")),
    DatasetSpec("hermes_top_sessions", HERMES_TOP_SESSIONS, ("day", "ranking", "rank"), ("day", "ranking", "rank")),
)


# --------------------------------------------------------------------------
# what to rotate: where each secret was seen, and one row per secret (docs/redaction.md)
# --------------------------------------------------------------------------

SIGHTINGS = "hermes_secret_sightings"
EXPOSURES = "hermes_secret_exposures"
TEXT_LIST = pa.list_(S)

#: a secret as the warehouse knows it: its marker and kind, its provider's prefix and its last four characters
_SECRET = [
    pa.field("marker", S, nullable=False),
    pa.field("kind", S, nullable=False),
    pa.field("prefix", S),
    pa.field("last4", S),
]
#: one row per place a secret was replaced by its marker: written by the capture beside the
#: three datasets, per day and host (never the secret)
HERMES_SECRET_SIGHTINGS = pa.schema(
    [
        *_SECRET,
        pa.field("store", S),
        pa.field("store_label", S, nullable=False),
        pa.field("session_id", S, nullable=False),
        pa.field("message_id", S),
        pa.field("field", S, nullable=False),
        pa.field("json_path", S, nullable=False),
        pa.field("channel", S),
        pa.field("seen_at", TS),
        pa.field("source_deleted", B, nullable=False),
        pa.field("host", S, nullable=False),
        pa.field("day", S, nullable=False),
    ]
)

#: one row per distinct secret (its marker), over every host's sightings
HERMES_SECRET_EXPOSURES = pa.schema(
    [
        *_SECRET,
        pa.field("still_in_store", B, nullable=False),
        pa.field("first_seen", TS),
        pa.field("last_seen", TS),
        pa.field("first_day", S, nullable=False),
        pa.field("last_day", S, nullable=False),
        pa.field("sightings", I64, nullable=False),
        pa.field("sessions", I64, nullable=False),
        pa.field("messages", I64, nullable=False),
        pa.field("channels", TEXT_LIST, nullable=False),
        pa.field("stores", TEXT_LIST, nullable=False),
        pa.field("hosts", TEXT_LIST, nullable=False),
        pa.field("fields", TEXT_LIST, nullable=False),
    ]
)

_SIGHTING_KEY = ("host", "store_label", "session_id", "message_id", "field", "json_path", "marker")
#: the secrets' datasets, by name (like :data:`DATASETS`)
SECRETS = _specs(
    DatasetSpec(SIGHTINGS, HERMES_SECRET_SIGHTINGS, _SIGHTING_KEY, _SIGHTING_KEY),
    DatasetSpec(EXPOSURES, HERMES_SECRET_EXPOSURES, ("marker",), ("marker",)),
)
#: the datasets whose day is one file per host (``day=<day>/host=<label>/``): what each host captures
PER_HOST = (*CAPTURE_DATASETS, SIGHTINGS)


def spec(dataset: str) -> DatasetSpec:
    """A captured (:data:`DATASETS`), derived (:data:`ANALYTICS`) or secrets' (:data:`SECRETS`) dataset, by name."""
    found = DATASETS.get(dataset) or ANALYTICS.get(dataset) or SECRETS.get(dataset)
    if found is None:
        known = ", ".join([*DATASETS, *ANALYTICS, *SECRETS])
        raise KeyError(f"{dataset!r} is not a hermes_assets dataset (known: {known})")
    return found


def schema_of(dataset: str) -> pa.Schema:
    """The Arrow schema of a captured or derived dataset."""
    return spec(dataset).schema


def sort_of(dataset: str) -> tuple[str, ...]:
    """The columns a dataset's partition file is ordered by."""
    return spec(dataset).sort_keys


def storage_of(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """An extension column's values in its storage type (a JSON column's text as ``string``):
    its chunks' storage, no value converted."""
    return pa.chunked_array([c.storage for c in column.chunks], column.type.storage_type)


def empty_table(schema: pa.Schema) -> pa.Table:
    """``schema.empty_table()`` (one empty chunk per column), built from typed empty arrays:
    pyarrow's own converts an empty Python list, and its first conversion of Python values in a
    process imports pandas when it is installed (a third of a second), which a run of days without
    any session has no other reason to do."""
    return pa.table([pa.nulls(0, field.type) for field in schema], schema=schema)


def table_of_rows(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """``pa.Table.from_pylist(rows, schema=schema)``; no rows: :func:`empty_table` (the same table,
    without the conversion of Python values that imports pandas)."""
    return pa.Table.from_pylist(rows, schema=schema) if rows else empty_table(schema)
