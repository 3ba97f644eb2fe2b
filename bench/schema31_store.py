#!/usr/bin/env python3
"""A schema-31-shaped copy of a bench store, by raw SQL (for sensor timings only; not a fixture).

What Hermes v0.22's migrations do to a v22 store, in the shape the sensor sees:
the sessions columns of v0.22 appended (ALTER TABLE ADD COLUMN), prompts moved
to ``system_prompts(hash, prompt)`` under their SHA-256 with
``sessions.system_prompt`` NULL, ``title_source`` / ``pinned`` / ``hidden`` /
``created_source`` filled. Messages keep their v22 columns. Then
``bench/sensor_bench.py --store <dest>`` (its change ticks need the 0.19
writer: use the tier figures) or a direct ``Fingerprinter`` timing.

    python bench/schema31_store.py /tmp/bench/large/state.db /tmp/bench/large31/state.db
"""

import hashlib
import shutil
import sqlite3
import sys

src, dest = sys.argv[1], sys.argv[2]
shutil.copyfile(src, dest)
conn = sqlite3.connect(dest)
conn.execute("PRAGMA journal_mode=DELETE")
have = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
new = [
    "created_source TEXT",
    "system_prompt_hash TEXT",
    "git_metadata_generation INTEGER NOT NULL DEFAULT 0",
    "title_source TEXT",
    "last_activity_at REAL",
    "last_activity_description TEXT",
    "last_activity_provenance TEXT",
    "compression_ineffective_count INTEGER NOT NULL DEFAULT 0",
    "compression_recovery_deadline REAL",
    "compression_overload_streak INTEGER NOT NULL DEFAULT 0",
    "transport_profile TEXT",
    "auto_archived INTEGER NOT NULL DEFAULT 0",
    "pinned INTEGER NOT NULL DEFAULT 0",
    "hidden INTEGER NOT NULL DEFAULT 0",
    "last_read_at REAL",
    "tool_names TEXT",
]
for col in new:
    if col.split()[0] not in have:
        conn.execute(f"ALTER TABLE sessions ADD COLUMN {col}")
conn.execute("CREATE TABLE IF NOT EXISTS system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL)")
conn.create_function("sha", 1, lambda s: None if s is None else hashlib.sha256(s.encode()).hexdigest())
conn.execute(
    "INSERT OR IGNORE INTO system_prompts SELECT sha(system_prompt), system_prompt FROM sessions "
    "WHERE system_prompt IS NOT NULL"
)
conn.execute(
    "UPDATE sessions SET system_prompt_hash = sha(system_prompt), system_prompt = NULL, "
    "title_source = CASE WHEN title IS NULL THEN NULL WHEN rowid % 3 = 0 THEN 'user' ELSE 'auto' END, "
    "pinned = (rowid % 97 = 0), hidden = (rowid % 89 = 0), last_activity_at = ended_at, created_source = source"
)
conn.execute("UPDATE schema_version SET version = 31")
conn.commit()
conn.execute("VACUUM")
conn.execute("PRAGMA journal_mode=WAL")
print(
    conn.execute("select count(*), count(distinct system_prompt_hash) from sessions").fetchone(),
    conn.execute("select count(*) from system_prompts").fetchone(),
)
conn.close()
