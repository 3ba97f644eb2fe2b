"""How often a step copies Dagster's metadata accumulator (once per ``add_asset_metadata`` call)."""

from typing import Any

import pytest
from dagster._core.execution.context.metadata_logging import OutputMetadataAccumulator


def count_copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets one item each time a step copies its metadata accumulator from now on."""
    copies: list[int] = []
    accumulate = OutputMetadataAccumulator.with_additional_asset_metadata

    def counted(self: OutputMetadataAccumulator, *args: Any, **kwargs: Any) -> OutputMetadataAccumulator:
        copies.append(1)
        return accumulate(self, *args, **kwargs)

    monkeypatch.setattr(OutputMetadataAccumulator, "with_additional_asset_metadata", counted)
    return copies
