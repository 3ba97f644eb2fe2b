"""Tests of the usage-policy resolver (SPEC §7, §5.7): one rule per test."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from hermes_assets.lib.basics.errors import PolicyListUnreadable
from hermes_assets.lib.plan import policy
from hermes_assets.lib.plan.policy import (
    FULL,
    IGNORE,
    LOCAL_ONLY,
    PolicyResolver,
    channel_scope_path,
    is_channel,
    most_restrictive,
    scope_path,
)


def make_dir(root: Path, rel: str, hypignore: str | bytes | None = None) -> Path:
    d = root / rel
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(hypignore, bytes):
        (d / ".hypignore").write_bytes(hypignore)
    elif hypignore is not None:
        (d / ".hypignore").write_text(hypignore, encoding="utf-8")
    return d


def write_list(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "local-only.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return str(path)


@pytest.fixture
def resolver(tmp_path: Path) -> PolicyResolver:
    """A resolver with no machine-local list (the file does not exist)."""
    return PolicyResolver(str(tmp_path / "absent.json"))


# -- classes and scopes --------------------------------------------------------


def test_most_restrictive_orders_ignore_then_local_only_then_full():
    assert most_restrictive(FULL, LOCAL_ONLY) == LOCAL_ONLY
    assert most_restrictive(LOCAL_ONLY, IGNORE, FULL) == IGNORE
    assert most_restrictive(FULL, FULL) == FULL


def test_every_non_interactive_source_is_a_channel():
    assert is_channel("telegram") and is_channel("some_future_platform")
    for source in ("cli", "tui", "cron", "acp", "subagent", "tool", "import", "unknown", "", None):
        assert not is_channel(source)


def test_channel_scope_path_and_scope_path():
    assert channel_scope_path("discord", "/home/u") == "/home/u/.hermes/channels/discord"
    assert scope_path("discord", "/work/x", "/home/u") == "/home/u/.hermes/channels/discord"
    assert scope_path("cli", "/work/x", "/home/u") == "/work/x"
    assert scope_path("cli", "", "/home/u") is None
    assert scope_path(None, None, "/home/u") is None


def test_no_scope_is_full(resolver):
    assert resolver.classify_scope(None) == FULL
    assert resolver.classify_scope("") == FULL


def test_no_hypignore_anywhere_is_full(tmp_path, resolver):
    assert resolver.classify_scope(str(make_dir(tmp_path, "a/b"))) == FULL


def test_channel_scope_is_classified_by_its_channel_directory(tmp_path, resolver):
    make_dir(tmp_path, "home/.hermes/channels/telegram", "local-only\n")
    scope = scope_path("telegram", "/elsewhere", str(tmp_path / "home"))
    assert resolver.classify_scope(scope) == LOCAL_ONLY
    assert resolver.classify_scope(scope_path("discord", None, str(tmp_path / "home"))) == FULL


# -- .hypignore ------------------------------------------------------------------


def test_nearest_hypignore_wins_over_stricter_outer(tmp_path, resolver):
    make_dir(tmp_path, "outer", "ignore\n")
    inner = make_dir(tmp_path, "outer/inner", "local-only\n")
    assert resolver.classify_scope(str(inner / "deeper")) == LOCAL_ONLY
    assert resolver.classify_scope(str(tmp_path / "outer" / "sibling")) == IGNORE


def test_empty_hypignore_is_ignore(tmp_path, resolver):
    assert resolver.classify_scope(str(make_dir(tmp_path, "p", ""))) == IGNORE


def test_comment_only_hypignore_is_ignore(tmp_path, resolver):
    d = make_dir(tmp_path, "p", "# local-only\n   \n\t# full\n")
    assert resolver.classify_scope(str(d)) == IGNORE


def test_bom_crlf_and_comments_are_trimmed(tmp_path, resolver):
    d = make_dir(tmp_path, "p", "\ufeff# header\r\n\r\n  local-only  # why\r\nignore\r\n".encode())
    assert resolver.classify_scope(str(d)) == LOCAL_ONLY
    assert resolver.warnings == []


def test_full_token_is_ignore_with_warning(tmp_path, resolver):
    d = make_dir(tmp_path, "p", "full\n")
    with capture_logs() as logs:
        assert resolver.classify_scope(str(d)) == IGNORE
    expected = {"event": "bad_class_token", "path": str(d / ".hypignore"), "token": "full"}
    assert resolver.warnings == [expected]
    assert any(e["event"] == "hermes.policy.bad_class_token" and e["token"] == "full" for e in logs)


def test_unknown_token_is_ignore_with_warning(tmp_path, resolver):
    d = make_dir(tmp_path, "p", "Local-Only extra words\n")
    assert resolver.classify_scope(str(d)) == IGNORE
    assert [w["token"] for w in resolver.warnings] == ["Local-Only"]


def test_directory_named_hypignore_is_ignore(tmp_path, resolver):
    d = make_dir(tmp_path, "p")
    (d / ".hypignore").mkdir()
    assert resolver.classify_scope(str(d)) == IGNORE
    assert resolver.warnings[0]["event"] == "hypignore_unreadable"


def test_permission_denied_hypignore_is_ignore(tmp_path, resolver, monkeypatch):
    d = make_dir(tmp_path, "p", "local-only\n")
    denied, real_open = str(d / ".hypignore"), os.open

    def fake_open(path, *args, **kwargs):  # tests run as root, so chmod 000 would not deny
        if os.fspath(path) == denied:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(policy.os, "open", fake_open)
    assert resolver.classify_scope(str(d)) == IGNORE
    assert resolver.warnings == [{"event": "hypignore_unreadable", "path": denied, "reason": "PermissionError"}]


def test_dangling_symlink_hypignore_is_ignore(tmp_path, resolver):
    d = make_dir(tmp_path, "p")
    (d / ".hypignore").symlink_to(tmp_path / "gone")
    assert resolver.classify_scope(str(d)) == IGNORE


def test_binary_hypignore_is_ignore(tmp_path, resolver):
    d = make_dir(tmp_path, "p", b"\xff\xfe\x00\x89PNG\x00\x01local-only\n")
    assert resolver.classify_scope(str(d)) == IGNORE
    assert resolver.warnings[0]["event"] == "bad_class_token"


def test_huge_hypignore_reads_only_the_head(tmp_path, resolver):
    d = make_dir(tmp_path, "p", b"local-only\n" + b"x" * (10 * 1024 * 1024))
    started = time.monotonic()
    assert resolver.classify_scope(str(d)) == LOCAL_ONLY
    assert time.monotonic() - started < 0.5


def test_token_beyond_the_read_limit_is_not_seen(tmp_path, resolver):
    d = make_dir(tmp_path, "p", b"\n" * (10 * 1024 * 1024) + b"local-only\n")
    assert resolver.classify_scope(str(d)) == IGNORE  # the head read is blank: fail safe


def test_hypignore_found_through_the_real_path_of_a_symlinked_scope(tmp_path, resolver):
    make_dir(tmp_path, "real", "ignore\n")
    target = make_dir(tmp_path, "real/x")
    link = make_dir(tmp_path, "links") / "x"
    link.symlink_to(target)
    assert resolver.classify_scope(str(link / "not-yet-created")) == IGNORE


# -- the machine-local list ----------------------------------------------------------


def test_missing_list_means_no_entries(tmp_path):
    r = PolicyResolver(str(tmp_path / "nope" / "local-only.json"))
    assert r.classify_scope(str(make_dir(tmp_path, "a"))) == FULL


def test_list_v1_dirs_are_local_only(tmp_path):
    a = make_dir(tmp_path, "a")
    r = PolicyResolver(write_list(tmp_path, {"version": 1, "dirs": [str(a)]}))
    assert r.classify_scope(str(a)) == LOCAL_ONLY
    assert r.classify_scope(str(a / "sub")) == LOCAL_ONLY
    assert r.classify_scope(str(tmp_path / "b")) == FULL


def test_list_v2_deepest_entry_wins(tmp_path):
    entries = [
        {"dir": str(tmp_path / "a"), "class": "ignore"},
        {"dir": str(tmp_path / "a" / "b"), "class": "full"},
        {"dir": str(tmp_path / "a" / "b" / "c"), "class": "local-only"},
    ]
    r = PolicyResolver(write_list(tmp_path, {"version": 2, "entries": entries}))
    assert r.classify_scope(str(tmp_path / "a" / "x")) == IGNORE
    assert r.classify_scope(str(tmp_path / "a" / "b" / "x")) == FULL
    assert r.classify_scope(str(tmp_path / "a" / "b" / "c" / "x")) == LOCAL_ONLY


def test_list_match_is_segment_aware(tmp_path):
    r = PolicyResolver(write_list(tmp_path, {"version": 2, "entries": [{"dir": "/a/b", "class": "ignore"}]}))
    assert r.classify_scope("/a/b") == IGNORE
    assert r.classify_scope("/a/b/c") == IGNORE
    assert r.classify_scope("/a/bc") == FULL
    assert r.classify_scope("/a") == FULL


def test_list_trailing_slashes_are_normalized(tmp_path):
    r = PolicyResolver(write_list(tmp_path, {"version": 1, "dirs": ["/a/b/"]}))
    assert r.classify_scope("/a/b//") == LOCAL_ONLY
    assert r.classify_scope("/a/b/c/") == LOCAL_ONLY


def test_malformed_list_raises(tmp_path):
    path = write_list(tmp_path, '{"version": 2, "entries": [')
    with pytest.raises(PolicyListUnreadable) as info:
        PolicyResolver(path)
    assert path in str(info.value) and info.value.error_kind == "policy_list_unreadable"


def test_list_with_bad_entry_raises(tmp_path):
    path = write_list(tmp_path, {"version": 2, "entries": [{"dir": "/a", "class": "secret"}]})
    with pytest.raises(PolicyListUnreadable, match="entries"):
        PolicyResolver(path)


def test_list_with_wrong_version_raises(tmp_path):
    path = write_list(tmp_path, {"version": 3, "entries": []})
    with pytest.raises(PolicyListUnreadable, match="version 3"):
        PolicyResolver(path)


def test_list_that_is_a_directory_raises(tmp_path):
    (tmp_path / "list.json").mkdir()
    with pytest.raises(PolicyListUnreadable):
        PolicyResolver(str(tmp_path / "list.json"))


def test_list_entry_naming_the_real_dir_matches_a_symlinked_scope(tmp_path):
    real = make_dir(tmp_path, "real")
    (tmp_path / "link").symlink_to(real)
    r = PolicyResolver(write_list(tmp_path, {"version": 2, "entries": [{"dir": str(real), "class": "ignore"}]}))
    assert r.classify_scope(str(tmp_path / "link" / "sub")) == IGNORE


def test_list_entry_naming_a_symlink_matches_the_real_scope(tmp_path):
    real = make_dir(tmp_path, "real")
    (tmp_path / "link").symlink_to(real)
    entries = [{"dir": str(tmp_path / "link"), "class": "local-only"}]
    r = PolicyResolver(write_list(tmp_path, {"version": 2, "entries": entries}))
    assert r.classify_scope(str(real / "sub")) == LOCAL_ONLY


def test_result_is_most_restrictive_of_hypignore_and_list(tmp_path):
    a = make_dir(tmp_path, "a", "local-only\n")
    b = make_dir(tmp_path, "b", "ignore\n")
    entries = [{"dir": str(a), "class": "ignore"}, {"dir": str(b), "class": "full"}]
    r = PolicyResolver(write_list(tmp_path, {"version": 2, "entries": entries}))
    assert r.classify_scope(str(a)) == IGNORE
    assert r.classify_scope(str(b)) == IGNORE


# -- sessions and caching -------------------------------------------------------------


def test_child_of_ignored_parent_is_ignored(tmp_path, resolver):
    ignored = make_dir(tmp_path, "secret", "ignore\n")
    local = make_dir(tmp_path, "local", "local-only\n")
    sessions = {
        "root": (str(ignored), None),
        "child": (str(tmp_path / "open"), "root"),
        "grandchild": (None, "child"),
        "other": (str(tmp_path / "open"), ""),
        "local_kid": (str(tmp_path / "open"), "local_root"),
        "local_root": (str(local), None),
    }
    assert resolver.classify_sessions(sessions) == {
        "root": IGNORE,
        "child": IGNORE,
        "grandchild": IGNORE,
        "other": FULL,
        "local_kid": LOCAL_ONLY,
        "local_root": LOCAL_ONLY,
    }


def test_missing_ancestor_contributes_nothing(tmp_path, resolver):
    assert resolver.classify_sessions({"kid": (str(tmp_path), "gone")}) == {"kid": FULL}


def test_parent_cycle_is_safe(tmp_path, resolver):
    ignored = make_dir(tmp_path, "secret", "ignore\n")
    sessions = {
        "a": (str(tmp_path / "x"), "b"),
        "b": (str(ignored), "c"),
        "c": (None, "a"),
        "d": (None, "a"),
        "self": (str(tmp_path / "x"), "self"),
    }
    assert resolver.classify_sessions(sessions) == {"a": IGNORE, "b": IGNORE, "c": IGNORE, "d": IGNORE, "self": FULL}


def test_cache_is_per_resolver_instance(tmp_path):
    d = make_dir(tmp_path, "p", "local-only\n")
    first = PolicyResolver(str(tmp_path / "absent.json"))
    assert first.classify_scope(str(d)) == LOCAL_ONLY
    (d / ".hypignore").write_text("ignore\n")
    assert first.classify_scope(str(d)) == LOCAL_ONLY  # one run sees one policy
    assert PolicyResolver(str(tmp_path / "absent.json")).classify_scope(str(d)) == IGNORE
