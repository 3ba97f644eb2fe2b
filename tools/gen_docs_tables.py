#!/usr/bin/env python3
"""gen_docs_tables.py -- the column tables of docs/contract.md, from the code's own schemas.

    python tools/gen_docs_tables.py            # rewrite the generated blocks of docs/contract.md
    python tools/gen_docs_tables.py --check    # exit 1 (and say which) when a block is out of date

The contract's column lists are not typed by hand: each sits between two markers,

    <!-- generated: NAME (tools/gen_docs_tables.py) -->
    ...
    <!-- end generated: NAME -->

and is rendered from ``hermes_assets.lib.basics.schemas`` (the Arrow schemas the
warehouse writes, and the Hermes columns the reader selects by name) and from
``hermes_assets.defs.settings`` (every variable and the form it accepts), and
the analytics' column texts from ``hermes_assets.lib.analytics.columns``. When a
schema or a setting changes, run this tool and commit the document with the code;
``tests/docs/test_contract.py`` fails until then. Everything outside the
markers is prose and is left as it is.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from anywhere, without installing the project

from hermes_assets.defs import settings  # noqa: E402
from hermes_assets.lib.analytics import columns  # noqa: E402
from hermes_assets.lib.basics import hermes_tables, schemas  # noqa: E402

CONTRACT = REPO / "docs" / "contract.md"
BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) \(tools/gen_docs_tables.py\) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
    re.S,
)


def _default(value) -> str:
    return "NULL" if value is None else f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def hermes_table(columns) -> str:
    """Hermes's own columns: name, SQLite type, and what a store without the column reads as."""
    rows = ["| # | column | SQLite type | when the store lacks it |", "|---|---|---|---|"]
    rows += [f"| {i} | `{name}` | {sql} | {_default(default)} |" for i, (name, sql, default) in enumerate(columns, 1)]
    return "\n".join(rows)


def arrow_table(schema, meanings: dict[str, str] | None = None) -> str:
    """A dataset's columns as written: name, Arrow type, whether it can be NULL (and, for the
    analytics, what each holds and how it stands to Hermes's report)."""
    if meanings is None:
        rows = ["| # | column | type | null |", "|---|---|---|---|"]
        rows += [
            f"| {i} | `{f.name}` | {_type(f.type)} | {'yes' if f.nullable else 'never'} |"
            for i, f in enumerate(schema, 1)
        ]
        return "\n".join(rows)
    rows = ["| # | column | type | null | meaning |", "|---|---|---|---|---|"]
    rows += [
        f"| {i} | `{f.name}` | {_type(f.type)} | {'yes' if f.nullable else 'never'} | {meanings[f.name]} |"
        for i, f in enumerate(schema, 1)
    ]
    return "\n".join(rows)


def _type(t) -> str:
    text = str(t)
    return "JSON (string)" if text.startswith("extension<arrow.json") else text


def settings_table() -> str:
    """Every setting's variable and the form it accepts (what a bad value's one line says)."""
    rows = ["| variable | accepted form |", "|---|---|"]
    rows += [f"| `{name}` | {form} |" for name, form in settings.VARIABLES.values()]
    return "\n".join(rows)


def tables() -> dict[str, str]:
    """Every generated block, by name."""
    out = {
        "sessions-source": hermes_table(hermes_tables.SESSION_COLUMNS),
        "messages-source": hermes_table(hermes_tables.MESSAGE_COLUMNS),
        "usage-source": hermes_table(hermes_tables.USAGE_COLUMNS),
        "settings": settings_table(),
    }
    for name, spec in {**schemas.DATASETS, **schemas.ANALYTICS, **schemas.SECRETS}.items():
        meanings = columns.DESCRIPTIONS.get(name)
        out[name] = arrow_table(spec.schema, meanings) + f"\n\nKey: {', '.join(f'`{k}`' for k in spec.key)}."
    return out


def render(text: str) -> tuple[str, list[str]]:
    """``text`` with every generated block rendered anew, and the names of the blocks that changed."""
    wanted = tables()
    changed = []

    def fill(match: re.Match) -> str:
        name = match.group("name")
        if name not in wanted:
            raise SystemExit(f"docs/contract.md names a generated block {name!r} this tool does not know")
        body = wanted[name] + "\n"
        if body != match.group("body"):
            changed.append(name)
        return match.group(1) + body + match.group(4)

    result = BLOCK.sub(fill, text)
    missing = sorted(set(wanted) - set(block_names(text)))
    if missing:
        raise SystemExit(f"docs/contract.md has no generated block for {missing}")
    return result, changed


def block_names(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a block is out of date")
    args = ap.parse_args()
    text = CONTRACT.read_text(encoding="utf-8")
    result, changed = render(text)
    if args.check:
        if changed:
            print(f"out of date in docs/contract.md: {', '.join(changed)} (run python tools/gen_docs_tables.py)")
            return 1
        return 0
    if changed:
        CONTRACT.write_text(result, encoding="utf-8")
    print(f"docs/contract.md: {len(changed)} block(s) rewritten{': ' + ', '.join(changed) if changed else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
