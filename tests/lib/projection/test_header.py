"""A session's header (:mod:`hermes_assets.lib.projection.header`): what every canonical row
of one session shares (SPEC §5.5-§5.8)."""

from __future__ import annotations

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.plan import policy
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.projection.gateway import SESSION_COLUMNS
from hermes_assets.lib.projection.header import SessionInput, session_header
from hermes_assets.lib.source.stores import Store
from tests.lib.projection.bundles import NOW_S, T0, bundle, message

CTX = ProjectionContext(user_home="/home/u", now_s=NOW_S, git=NoGit())


class OneRepo(NoGit):
    def _run(self, cwd, args):
        return "/work/repo" if args[-1] == "--show-toplevel" else "https://tok@example.com/a/b.git"


def _columns(header) -> dict:
    return dict(zip(SESSION_COLUMNS, header.columns))


def test_an_interactive_session_keeps_its_cwd_and_looks_up_git():
    ctx = ProjectionContext(user_home="/home/u", now_s=NOW_S, git=OneRepo())
    header = session_header(SessionInput(bundle(message(1), cwd="/work/repo/src")), ctx, ErrorTally())
    cols = _columns(header)
    assert (cols["cwd"], cols["repo_root"], cols["git_remote"]) == (
        "/work/repo/src",
        "/work/repo",
        "https://example.com/a/b.git",
    )
    assert header.hermes == {"source": "cli"} and header.start_ms == int(T0 * 1000)


def test_a_channel_session_gets_its_channel_path_and_no_git():
    ctx = ProjectionContext(user_home="/home/u", now_s=NOW_S, git=OneRepo())
    header = session_header(SessionInput(bundle(message(1), source="telegram", cwd="/srv/bot")), ctx, ErrorTally())
    cols = _columns(header)
    assert cols["cwd"] == "/home/u/.hermes/channels/telegram"
    assert (cols["repo_root"], cols["git_remote"]) == (None, None)
    assert header.hermes == {"source": "telegram", "real_cwd": "/srv/bot"}


def test_store_profile_policy_and_generation_reach_the_header():
    store = Store("/h/profiles/work/state.db", label="work", profile="work")
    item = SessionInput(bundle(message(1), store=store, parent_session_id=7), policy.LOCAL_ONLY, generation=2)
    header = session_header(item, CTX, ErrorTally())
    assert header.session_id == "hermes-work:s.g2" and header.scoped == "work:s"
    assert header.hermes == {"source": "cli", "store": "work", "profile": "work", "policy": "local-only"}
    assert _columns(header)["parent_thread_id"] == "hermes-work:7"
    assert header.attrs["gateway"] == {"source": "backfill", "source_path_hash": store.path_hash, "native_id": "s"}
    assert header.plain_attrs.startswith('{"client":{"name":"hermes"},"hermes":{"source":"cli","store":"work"')


def test_a_session_with_no_sane_time_has_no_header():
    tally = ErrorTally()
    item = SessionInput(bundle(message(1, timestamp=None), started_at=None))
    assert session_header(item, CTX, tally) is None
    assert dict(tally.counts) == {errors.OUT_OF_RANGE_SESSION: 1}


def test_an_insane_start_falls_back_to_the_first_message_and_is_counted():
    tally = ErrorTally()
    header = session_header(SessionInput(bundle(message(5), started_at="yesterday")), CTX, tally)
    assert header.start_ms == int((T0 + 5) * 1000)
    assert dict(tally.counts) == {errors.BAD_TIMESTAMP: 1}
