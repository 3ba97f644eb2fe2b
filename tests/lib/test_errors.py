"""The one list of error kinds (SPEC §9) and what derives from it (:mod:`hermes_assets.lib.basics.errors`)."""

from __future__ import annotations

import re
from pathlib import Path

from hermes_assets.lib.basics import errors

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"


def test_every_exception_carries_the_kind_it_is_listed_with():
    raised = {
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.HermesAssetsError) and cls is not errors.HermesAssetsError
    }
    listed = {kind.exception for kind in errors.KINDS.values() if kind.exception is not None}
    assert raised == listed
    for name, kind in errors.KINDS.items():
        assert kind.name == name
        if kind.exception is not None:
            assert kind.exception.error_kind == name
            assert errors.by_kind(name) is kind.exception
    assert errors.by_kind("no_such_kind") is errors.HermesAssetsError


def test_the_warnings_and_the_store_errors_derive_from_the_list():
    assert {
        "store_replaced",
        "unknown_columns",
        "bad_class_token",
        "oversized_cell",
        "system_prompt_missing",
    } == errors.WARNING_KINDS
    assert set(errors.STORE_ERRORS) == {
        errors.StoreBusy,
        errors.StoreCorrupt,
        errors.StoreReplaced,
        errors.StoreMissing,
        errors.NotAHermesStore,
    }
    assert errors.error_count({"bad_text": 2, "oversized_cell": 5, "store_replaced": 1}) == 2


def test_an_absent_store_is_a_state_not_an_error():
    """Hermes not installed, or a store it is still creating (SPEC R9): no error_kind, and
    never caught as a store failure; an explicit path that does not exist is ``store_missing``."""
    absent = errors.StoreAbsent("no store yet", path="/x/state.db")
    assert not isinstance(absent, errors.HermesAssetsError) and absent.path == "/x/state.db"
    assert not isinstance(absent, errors.STORE_ERRORS)
    assert errors.StoreMissing("typo").error_kind == "store_missing"


def test_the_list_names_every_kind_the_contract_names():
    """docs/contract.md §9 names the kinds users see, each a warning or not: the list agrees
    (it may hold more, such as ``bad_class_token``)."""
    text = CONTRACT.read_text(encoding="utf-8")
    paragraph = text[text.index("`error_kind` values:") :]
    paragraph = paragraph[: paragraph.index("\n\n")]
    named = re.findall(r"`([a-z_]+)`(\s+\(warning)?", paragraph)
    assert len(named) > 15
    for name, warning in named:
        if name in ("error_kind", "system_prompt_hash", "system_prompts"):  # a field, a column, a table
            continue
        assert name in errors.KINDS, name
        assert (errors.KINDS[name].severity == errors.WARNING) == bool(warning), name
