"""How far a long step has gone (``hermes_assets.lib.capture.progress``), on a clock in hand.

Every day reaches the bar; a report reaches the run's log at most every few seconds, and once
at the end when one came before; a step shorter than that reports nothing. The estimate of the
time left is the average time per day so far times the days left.
"""

from __future__ import annotations

from hermes_assets.lib.capture.progress import REPORT_EVERY_S, Progress, Report


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_days_reach_the_bar_each_and_the_log_every_few_seconds_then_once_at_the_end():
    clock, reports, days = Clock(), [], []
    progress = Progress("project_rows", 10, on_report=reports.append, on_day=days.append, every_s=5.0, clock=clock)
    for n in range(10):
        clock.now += 2.0  # a day every two seconds: a report every third day
        progress.advance(rows=100 + n)
    final = progress.finish()
    assert [d.days_done for d in days] == list(range(1, 11))
    assert [r.days_done for r in reports] == [3, 6, 9, 10]
    assert reports[-1] == final and final.done and final.rows == sum(100 + n for n in range(10))
    assert reports[0].fields() == {
        "step": "project_rows",
        "days_done": 3,
        "days": 10,
        "rows": 303,
        "seconds": 6.0,
        "eta_s": 14,
    }


def test_a_short_step_reports_nothing_but_its_bar():
    clock, reports, days = Clock(), [], []
    progress = Progress("write_partitions", 3, on_report=reports.append, on_day=days.append, clock=clock)
    for _ in range(3):
        clock.now += REPORT_EVERY_S / 10
        progress.advance(rows=5)
    assert progress.finish().line() == "3/3 days · 15 rows · done"
    assert reports == [] and len(days) == 3


def test_the_estimate_is_the_time_per_day_so_far_times_the_days_left():
    clock = Clock()
    progress = Progress("project_rows", 131, clock=clock)
    assert progress.report().eta_s is None and progress.report().line() == "0/131 days · 0 rows"
    clock.now += 40.0
    progress.advance(rows=12_345, days=40)
    now = progress.report()
    assert now.eta_s == 40.0 / 40 * 91
    assert now.line() == "40/131 days · 12,345 rows · ~2 min left"  # 91 s: past 90 s, in minutes
    assert Report("s", 1, 1000, 0, 60.0, 59_940.0).line() == "1/1000 days · 0 rows · ~16.6 h left"
    assert Report("s", 10, 100, 0, 60.0, 540.0).line() == "10/100 days · 0 rows · ~9 min left"
