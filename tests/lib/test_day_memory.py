"""lib/capture/day_memory.py: a staging process hands its freed memory back once it has piled up."""

from __future__ import annotations

import pytest

from hermes_assets.lib.capture import day_memory

MB = 1024 * 1024


class _Pool:
    """Arrow's pool, counting its releases."""

    def __init__(self) -> None:
        self.releases = 0

    def release_unused(self) -> None:
        self.releases += 1


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> _Pool:
    fake = _Pool()
    monkeypatch.setattr(day_memory.pa, "default_memory_pool", lambda: fake)
    monkeypatch.setattr(day_memory, "_released", day_memory._Released())
    return fake


def _resident(monkeypatch: pytest.MonkeyPatch, sizes: list[int | None]) -> None:
    """The resident sizes the process reads, in turn (the last one from then on)."""
    monkeypatch.setattr(day_memory, "resident_bytes", lambda: sizes.pop(0) if len(sizes) > 1 else sizes[0])


def test_released_after_the_first_day_then_once_grown_by_the_threshold(
    pool: _Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    growth = day_memory.RELEASE_GROWTH
    # first day: released (nothing to compare with), 200 MB after it
    _resident(monkeypatch, [250 * MB, 200 * MB, 200 * MB + growth, 200 * MB + growth + 1, 210 * MB])
    day_memory.day_staged()
    assert pool.releases == 1
    day_memory.day_staged()  # grown by exactly the threshold: kept
    assert pool.releases == 1
    day_memory.day_staged()  # beyond it: released, and the size after it is the new mark
    assert pool.releases == 2
    day_memory.day_staged()  # 210 MB, 10 MB over the new mark
    assert pool.releases == 2


def test_released_every_day_where_the_resident_size_is_unknown(pool: _Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    _resident(monkeypatch, [None])
    for _ in range(3):
        day_memory.day_staged()
    assert pool.releases == 3


def test_resident_bytes_reads_this_process() -> None:
    resident = day_memory.resident_bytes()
    assert resident is None or resident > MB
