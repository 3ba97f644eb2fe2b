"""The README is read in five minutes, and every page it leads to is there.

The README keeps what a newcomer needs first (the two commands, the first ten
minutes, the datasets) and links the reference pages under ``docs/`` (and
``deploy/README.md``). Each relative link of the README and of those pages
names a file that exists, and a ``#anchor`` names a heading of its page, so a
page that moves or a heading that is renamed cannot leave a dead link behind.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: the pages the README links, each for a part of the reference material
PAGES = {
    "docs/running.md": "running",
    "docs/settings.md": "settings",
    "docs/redaction.md": "secret redaction",
    "docs/querying.md": "querying",
    "docs/building.md": "building on the datasets",
    "docs/contract.md": "the contract",
    "deploy/README.md": "deployment",
    "docs/benchmarks.md": "benchmarks",
    "docs/development.md": "development",
}
#: about 250 lines: what a newcomer reads in five minutes
MAX_LINES = 250
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of the headings of ``page``."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def _links(page: Path) -> list[str]:
    return [link for link in _LINK.findall(page.read_text(encoding="utf-8")) if "://" not in link]


def test_the_readme_is_short_and_starts_with_the_two_commands_and_the_first_ten_minutes():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, len(text.splitlines())
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[:3] == ["Two commands", "Your first ten minutes", "The datasets"], headings
    first = text[text.index("## Your first ten minutes") : text.index("## The datasets")]
    for step in ("make run", "Join the Dagster community", "*Partitions*", "make stop", "make run PORT=", "make query"):
        assert step in first, step


def test_the_readme_links_every_reference_page():
    linked = set(_links(README))
    for page in PAGES:
        assert page in linked, f"the README does not link {page}"


def test_every_relative_link_of_the_readme_and_its_pages_resolves():
    for page in [README, *(REPO / p for p in PAGES)]:
        for link in _links(page):
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            assert target.exists(), f"{page.relative_to(REPO)} links {link}: no such file"
            if anchor and target.suffix == ".md":
                assert anchor in _anchors(target), f"{page.relative_to(REPO)} links {link}: no such heading"


def test_the_refusals_shown_are_the_line_make_prints():
    """The pages show make's refusal as make prints it: ``Makefile:<line of run's $(error)>: *** ...``."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    (line,) = [n for n, text in enumerate(makefile, 1) if "$(error $(REFUSED))" in text]
    shown = []
    for page in (README, REPO / "docs" / "running.md"):
        shown += re.findall(r"^Makefile:(\d+): \*\*\* .*\.  Stop\.$", page.read_text(encoding="utf-8"), re.M)
    assert len(shown) >= 3 and set(shown) == {str(line)}, shown
