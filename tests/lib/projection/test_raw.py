"""The raw datasets' tables (:class:`hermes_assets.lib.projection.raw.RawColumns`): Hermes's
cells in their v22 types, converted column by column, and a cell that does not fit
NULL on its own and counted (SPEC §9)."""

from __future__ import annotations

from hermes_assets.lib.basics import errors
from hermes_assets.lib.basics.errors import ErrorTally
from hermes_assets.lib.projection import raw
from hermes_assets.lib.projection.header import SessionInput
from tests.lib.projection.bundles import NOW_S, T0, bundle, message


def _table(*messages: dict):
    tally = ErrorTally()
    out = raw.messages_columns(NOW_S, tally)
    raw.message_rows(SessionInput(bundle(*messages)), out)
    return out.to_table(), tally


def _ms(table, column: str) -> list:
    return [None if t is None else int(t.timestamp() * 1000) for t in table.column(column).to_pylist()]


def test_cells_that_fit_are_kept_and_an_insane_time_is_null_and_counted():
    table, tally = _table(message(1, token_count=7), message(2, timestamp=1.0, display_metadata='[{"a":1}]'))
    assert table.column("token_count").to_pylist() == [7, None]
    assert _ms(table, "timestamp") == [int((T0 + 1) * 1000), None]
    assert table.column("display_metadata").to_pylist() == [None, '[{"a":1}]']
    assert tally.as_dict() == {errors.BAD_TIMESTAMP: 1}


def test_a_cell_that_does_not_fit_is_null_alone_the_rest_kept():
    table, tally = _table(
        message(1, token_count="many"), message(2, token_count=5, timestamp=1.0, display_metadata="{nope")
    )
    assert table.column("token_count").to_pylist() == [None, 5]
    assert table.column("content").to_pylist() == ["hi", "hi"]
    assert _ms(table, "timestamp") == [int((T0 + 1) * 1000), None]
    assert table.column("display_metadata").to_pylist() == [None, None]
    assert tally.as_dict() == {errors.BAD_VALUE: 2, errors.BAD_TIMESTAMP: 1}
