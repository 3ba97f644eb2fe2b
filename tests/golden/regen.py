"""Regenerate the golden rows of ``tests/golden/*.jsonl``.

ONLY run this after a reviewed change to the projection (a SPEC change or a
decided bug fix): the golden files are the reviewed expected output, and
``tests/lib/test_golden.py`` fails on any difference from them. Review the diff
of the regenerated files (``git diff tests/golden``) row by row before you
commit it.

    .venv/bin/python -m tests.golden.regen            # all fixtures
    .venv/bin/python -m tests.golden.regen small      # one fixture

The fixture stores (``tests/fixtures/<name>/state.db``) are copied to a temp
dir first and never opened in place.
"""

from __future__ import annotations

import sys

from tests.conftest import fixture_store
from tests.support.golden import DATASETS, FIXTURES, render_fixture, write_golden


def main(argv: list[str]) -> int:
    fixtures = argv or list(FIXTURES)
    unknown = sorted(set(fixtures) - set(FIXTURES))
    if unknown:
        print(f"unknown fixture(s) {unknown}; choose from {list(FIXTURES)}", file=sys.stderr)
        return 2
    for fixture in fixtures:
        rendered = render_fixture(fixture_store(fixture))
        for dataset in DATASETS:
            path = write_golden(fixture, dataset, rendered[dataset])
            print(f"{path}: {len(rendered[dataset])} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
