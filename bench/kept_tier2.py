"""The kept tier 2 of a store under a live writer, counted tick by tick (``bench/sensor_bench.py``).

A tick that reads every row starts the set of days whose tier 2 the rotation may keep empty
(:mod:`hermes_assets.lib.changes.tier2_pages`): the ticks within the rotation after it refill it,
and are timed apart from those after. A delta tick after which no day kept before it stays kept
is counted as emptying it (the pages written named every day).
"""

from __future__ import annotations

from pathlib import Path


class KeptTier2:
    """The live phase's ticks, counted: call :meth:`tick` around each."""

    def __init__(self, db: Path):
        from hermes_assets.lib.changes import watch

        self.path, self.watch = str(db), watch
        self.full = self.emptied = self.dropped = self.deltas = 0
        self.since_full = 0
        self.later: list[float] = []  # tick times more than ROTATION_TICKS after the last full pass

    def days(self) -> frozenset[str]:
        """The days whose tier 2 the next tick of the store may keep (the map this process keeps)."""
        from hermes_assets.lib.changes import delta_map

        m = delta_map._MAPS.get(self.path)
        return frozenset() if m is None else m.clean

    def tick(self, plan, ms: float, before: frozenset[str]) -> None:
        """Count a tick (``before``: :meth:`days` before it)."""
        w = self.watch
        if any(not s.delta for s in plan.scans if s.status in (w.READ, w.REPLACED, w.NEW)):
            self.full, self.since_full = self.full + 1, 0
            return
        after = self.days()
        self.deltas += 1
        self.since_full += 1
        self.emptied += len(before) > 1 and not before & after
        self.dropped += len(before - after)
        if self.since_full > w.ROTATION_TICKS:
            self.later.append(ms)

    def figures(self) -> dict:
        return {
            "live_full_passes": self.full,
            "live_kept_emptied": self.emptied,
            "live_kept_dropped_mean": round(self.dropped / max(1, self.deltas), 1),
            "live_rotation_ticks": self.watch.ROTATION_TICKS,
        }

    @staticmethod
    def summary(figures: dict) -> str:
        return (
            f"{figures['live_full_passes']} full pass(es), {figures['live_kept_emptied']} delta tick(s) keeping "
            f"none, {figures['live_kept_dropped_mean']} days dropped a delta tick"
        )

    @staticmethod
    def rows(figures: dict) -> list[tuple[str, float, str]]:
        """The report's rows of the live ticks past the rotation after a full pass (none: no such tick)."""
        if "live_past_rotation_change_tick_p50_ms" not in figures:
            return []
        n, after = figures["live_past_rotation_change_tick_n"], figures["live_rotation_ticks"]
        note = f"n={n}: more than {after} ticks after a full pass"
        name = "live writer, past the rotation: change tick {} (core)"
        return [(name.format(q), figures[f"live_past_rotation_change_tick_{q}_ms"], note) for q in ("p50", "p95")]
