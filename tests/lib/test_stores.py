"""Which stores there are and how their ids are scoped (:mod:`hermes_assets.lib.source.stores`, SPEC §1, D14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.source.stores import Store, discover_stores


def touch_store(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_hermes_state_db_single_file_has_empty_label(tmp_path):
    db = touch_store(tmp_path / "x" / "state.db")
    assert discover_stores(str(db)) == [Store(str(db), label="", explicit=True)]


def test_hermes_state_db_several_files_are_labelled_by_parent_folder(tmp_path):
    a = touch_store(tmp_path / "laptop" / "state.db")
    b = touch_store(tmp_path / "server" / "state.db")
    stores = discover_stores(f"{a}:{b}")
    assert [(s.path, s.label, s.profile, s.explicit) for s in stores] == [
        (str(a), "laptop", None, True),
        (str(b), "server", None, True),
    ]


def test_hermes_state_db_label_clash_is_a_configuration_error(tmp_path):
    a = touch_store(tmp_path / "one" / "same" / "state.db")
    b = touch_store(tmp_path / "two" / "same" / "state.db")
    with pytest.raises(ConfigurationError) as info:
        discover_stores(f"{a}:{b}")
    assert "same" in str(info.value)


def test_hermes_state_db_directory_labels_are_relative_folders(tmp_path):
    root = tmp_path / "stores"
    top = touch_store(root / "state.db")
    m1 = touch_store(root / "m1" / "state.db")
    deep = touch_store(root / "team" / "m2" / "state.db")
    (root / "empty").mkdir()
    stores = discover_stores(str(root))
    assert sorted((s.path, s.label, s.explicit) for s in stores) == sorted(
        [(str(top), "", False), (str(m1), "m1", False), (str(deep), "team/m2", False)]
    )


def test_hermes_home_with_profiles(tmp_path):
    home = tmp_path / "hh"
    work = touch_store(home / "profiles" / "work" / "state.db")
    (home / "profiles" / "no-store").mkdir(parents=True)
    stores = discover_stores(None, str(home))
    assert stores[0] == Store(str(home / "state.db"))  # listed even though missing (R9)
    assert not stores[0].exists()
    assert [(s.path, s.label, s.profile) for s in stores[1:]] == [(str(work), "work", "work")]


def test_default_home_is_dot_hermes_under_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    stores = discover_stores()
    assert stores == [Store(str(tmp_path / ".hermes" / "state.db"))]


def test_label_scopes_session_ids():
    assert Store("/x/state.db").scoped("s1") == "s1"
    assert Store("/x/state.db", label="work").scoped("s1") == "work:s1"


def test_explicit_store_that_does_not_exist_is_listed_as_explicit(tmp_path):
    """A store named in HERMES_STATE_DB is listed even when its file is missing, marked
    explicit: a run then fails naming it (a typo must not look like success, SPEC §1)."""
    path = tmp_path / "later" / "state.db"
    (store,) = discover_stores(str(path))
    assert store == Store(str(path), explicit=True) and not store.exists()
    assert str(path) in str(store.missing_error()) and store.missing_error().error_kind == "store_missing"
