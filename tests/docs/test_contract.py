"""docs/contract.md stays true to the code.

The contract's column and settings tables are generated from the code
(``tools/gen_docs_tables.py``); this test renders them from the schemas and
settings as they are *now* and fails when the document differs, saying which
command brings it up to date. The canonical table of §5.1 is prose (it says what
each column holds) and is held to the schema's names, order and required flags.
The settings table (``docs/settings.md``) names every setting exactly once.
"""

from __future__ import annotations

import importlib.util
import re

from hermes_assets.defs import settings
from hermes_assets.lib.basics import schemas
from tests.conftest import REPO

CONTRACT = REPO / "docs" / "contract.md"


def generator():
    spec = importlib.util.spec_from_file_location("gen_docs_tables", REPO / "tools" / "gen_docs_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_tables_match_the_code():
    text = CONTRACT.read_text(encoding="utf-8")
    rendered, changed = generator().render(text)
    assert changed == [], (
        f"docs/contract.md is out of date for {changed}: run "
        "`.venv/bin/python tools/gen_docs_tables.py` and commit the result"
    )
    assert rendered == text
    # every dataset the warehouse writes has its table (render refuses a missing block)
    for name in (*schemas.DATASETS, *schemas.ANALYTICS, *schemas.SECRETS):
        assert f"<!-- generated: {name} " in text


def test_the_canonical_table_names_every_column_in_order():
    text = CONTRACT.read_text(encoding="utf-8")
    section = text[text.index("### §5.1") : text.index("### §5.2")]
    rows = re.findall(r"^\| (\d+) \| (\w+)(\*?) \| (\w+) \|", section, re.M)
    assert [(int(n), name, bool(star)) for n, name, star, _ in rows] == [
        (i, name, required) for i, (name, _type, required) in enumerate(schemas.GATEWAY_COLUMNS, 1)
    ]


def test_the_settings_page_names_each_setting_once():
    page = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    section = page[page.index("## Variables") :]
    section = section[: section.index("\n## ", 1)]
    named = re.findall(r"^\| `([A-Z_]+)`", section, re.M)
    assert len(named) == len(set(named)), f"a setting is listed twice: {named}"
    assert set(named) == {name for name, _ in settings.VARIABLES.values()} | {"DAGSTER_HOME"}


def test_the_readme_points_at_the_contract():
    assert "docs/contract.md" in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_layout_names_every_module():
    page = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    layout = page[page.index("## Layout") :]
    layout = layout[: layout.index("\n## ", 1)]
    modules = sorted(
        p.relative_to(REPO / "hermes_assets") for p in (REPO / "hermes_assets").rglob("*.py") if p.name != "__init__.py"
    )
    missing = [str(m) for m in modules if m.name not in layout]
    assert missing == [], f"the Layout section of docs/development.md leaves out {missing}"
