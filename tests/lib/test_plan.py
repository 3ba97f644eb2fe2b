"""lib/plan/capture_plan.py: every session on its day, the usage policy applied before any row is built."""

from __future__ import annotations

import pytest

from hermes_assets.lib.basics import errors
from hermes_assets.lib.plan import capture_plan, policy
from hermes_assets.lib.plan.generations import Generations
from hermes_assets.lib.source.stores import Store
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter

DAY1, DAY2, DAY3 = "2026-06-01", "2026-06-02", "2026-06-03"
USER_HOME = "/home/tests"


@pytest.fixture
def store(tmp_path):
    """Day 1: ``root`` (in an ignored folder), ``plain``; day 2: ``child`` of ``root``, ``local``
    (a local-only folder), ``b-second``; day 3: ``late``."""
    projects = tmp_path / "projects"
    for name, text in (("ignored", "ignore\n"), ("local", "local-only\n"), ("open", None)):
        (projects / name).mkdir(parents=True)
        if text:
            (projects / name / ".hypignore").write_text(text)
    path = tmp_path / "hermes" / "state.db"
    with HermesWriter(path, start_s=START_S) as w:
        w.session("root", "cli", cwd=str(projects / "ignored"))
        w.session("plain", "cli", cwd=str(projects / "open"))
        w.at(START_S + DAY_S)
        w.session("child", "subagent", parent_session_id="root")
        w.session("local", "cli", cwd=str(projects / "local"))
        w.session("b-second", "cli")
        w.at(START_S + 2 * DAY_S)
        w.session("late", "cli")
    return path


def plan_of(path, days, **kwargs) -> capture_plan.CapturePlan:
    return capture_plan.plan_capture([Store(str(path))], days, user_home=USER_HOME, now_s=START_S + 9 * DAY_S, **kwargs)


def test_every_session_is_placed_on_its_day_in_one_statement(store):
    plan = plan_of(store, [DAY2, DAY1])
    (sp,) = plan.stores
    assert plan.days == [DAY1, DAY2] and sp.status == capture_plan.READ
    assert sp.days == {"root": DAY1, "plain": DAY1, "child": DAY2, "local": DAY2, "b-second": DAY2, "late": DAY3}
    assert sp.sessions_on(DAY2) == ["b-second", "child", "local"]  # sorted
    assert plan.sessions_in_range() == 5 and plan.statements["sessions_scan"] == 1
    # scopes of the run's sessions and of their ancestors only
    assert set(sp.scopes) == {"root", "plain", "child", "local", "b-second"}
    assert sp.parents["child"] == "root"
    assert sp.ancestors_off(sp.sessions_on(DAY2)) == ["root"]
    assert sp.ancestors_off(["root", "child"]) == []
    assert plan.nothing_to_capture() is None


def test_the_write_steps_plan_keeps_what_retention_reads_not_the_scopes(store):
    plan = plan_of(store, [DAY2, DAY1])
    written = plan.for_write()
    assert written.stores[0].scopes == {} and plan.stores[0].scopes  # the projection's plan keeps them
    assert written.facts(DAY2, {}) == plan.facts(DAY2, {}) and written.labels() == plan.labels()


def test_sessions_outside_the_partitions_are_reported_not_dropped_silently(store):
    plan = plan_of(store, [DAY1], first_day=DAY1, last_day=DAY2)
    assert plan.out_of_range == [("", "late", DAY3)]


def test_the_policy_classifies_with_the_ancestors_before_any_row_is_built(store):
    plan = capture_plan.apply_usage_policy(
        plan_of(store, [DAY1, DAY2]), policy.PolicyResolver("/nonexistent/list.json")
    )
    (sp,) = plan.stores
    assert sp.classes == {
        "root": policy.IGNORE,
        "plain": policy.FULL,
        "child": policy.IGNORE,  # inherits its parent's class (SPEC §7)
        "local": policy.LOCAL_ONLY,
        "b-second": policy.FULL,
    }
    assert sp.kept_on(DAY2) == ["b-second", "local"] and sp.ignored_on(DAY2) == {"child"}
    counts = plan.policy
    assert (counts.sessions, counts.full, counts.local_only, counts.ignored, counts.kept) == (5, 2, 1, 2, 3)
    # what retention judges a day's old rows by: every session of the store, the day's ignored ones
    (facts,) = plan.facts(DAY2, {str(store): Generations(sessions={"local": 1})})
    assert facts.path == str(store) and facts.sessions["late"] == DAY3
    assert facts.ignored == {"child"} and facts.sessions_now == {"local": 1}
    assert plan.facts(DAY2, {}, skip={str(store)}) == []


def test_a_missing_store_is_a_state_a_named_one_a_failure_and_a_broken_one_fails_alone(store, tmp_path):
    missing = Store(str(tmp_path / "nowhere" / "state.db"))
    named = Store(str(tmp_path / "typo.db"), explicit=True)
    broken_path = tmp_path / "broken" / "state.db"
    broken_path.parent.mkdir()
    broken_path.write_bytes(b"this is not a database" * 512)
    stores = [Store(str(store)), missing, named, Store(str(broken_path), label="broken")]
    plan = capture_plan.plan_capture(stores, [DAY1], user_home=USER_HOME, now_s=START_S + 9 * DAY_S)
    statuses = [sp.status for sp in plan.stores]
    assert statuses == [capture_plan.READ, capture_plan.MISSING, capture_plan.FAILED, capture_plan.FAILED]
    kinds = [f.error_kind for f in plan.failures()]
    assert kinds[0] == errors.StoreMissing.error_kind and kinds[1] in {"store_corrupt", "not_a_hermes_store"}
    assert [sp.store.path for sp in plan.readable()] == [str(store)]
    assert plan.sessions_in_range() == 2


def test_why_a_run_captures_nothing(store, tmp_path):
    assert "holds no partition" in capture_plan.plan_capture([], [], user_home=USER_HOME).nothing_to_capture()
    empty_day = plan_of(store, ["2026-05-01"])
    assert "hold no session on the 1 day(s) asked (2026-05-01)" in empty_day.nothing_to_capture()
    not_installed = capture_plan.plan_capture([Store(str(tmp_path / "none.db"))], [DAY1], user_home=USER_HOME)
    assert not_installed.nothing_to_capture() is None  # Hermes not installed: the idle case
