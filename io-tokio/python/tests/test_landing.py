"""Batches from pyarrow and polars land as rows, read back by an independent reader."""

from __future__ import annotations

import asyncio

import polars as pl
import pyarrow as pa
import pytest

import zerobus_sink

T = "main.bronze.orders"


def batch(start: int, n: int) -> pa.RecordBatch:
    ids = list(range(start, start + n))
    return pa.RecordBatch.from_pydict(
        {"id": pa.array(ids, pa.int64()), "name": pa.array([f"n{i}" for i in ids])}
    )


def local(emulator, **kwargs) -> zerobus_sink.Sink:
    return zerobus_sink.Sink(
        emulator.endpoint,
        tables=[T],
        catalog={"backend": "local", "root": str(emulator.tables)},
        **kwargs,
    )


def test_pyarrow_batches_tables_and_readers_land_with_their_positions(zerobus_local):
    with local(zerobus_local) as sink:
        assert sink.send(T, batch(0, 100), source=(0, 99)) == 100
        table = pa.Table.from_batches([batch(100, 50), batch(150, 50), batch(200, 50)])
        assert sink.send(T, table, source=(0, 249)) == 150
        reader = pa.RecordBatchReader.from_batches(
            batch(0, 1).schema, [batch(250, 30), batch(280, 20)]
        )
        assert sink.send(T, reader, source=(1, 7)) == 50
        sink.flush()
        assert sink.committed() == {(T, 0): 249, (T, 1): 7}
        seen = {(p.topic, p.partition): p.offset for p in sink.confirmations(timeout=0)}
        assert seen == {(T, 0): 249, (T, 1): 7}
        summary = sink.close()
    assert summary["rows"] == 300
    zerobus_local.stop()
    rows = zerobus_local.table(T)
    assert sorted(rows.column("id").to_pylist()) == list(range(300))
    by_id = {r["id"]: r for r in rows.to_pylist()}
    assert by_id[120]["_twg_source_end"] == 249 and by_id[120]["_twg_source_partition"] == 0
    assert by_id[260]["_twg_source_end"] == 7 and by_id[260]["_twg_source_partition"] == 1
    assert by_id[5]["name"] == "n5"


def test_a_polars_dataframe_lands(zerobus_local):
    df = pl.DataFrame({"id": list(range(1000)), "name": [f"p{i}" for i in range(1000)]})
    with local(zerobus_local) as sink:
        assert sink.send(T, df, source=(0, 999)) == 1000
        sink.flush()
        assert sink.committed() == {(T, 0): 999}
    zerobus_local.stop()
    rows = zerobus_local.table(T)
    assert sorted(rows.column("id").to_pylist()) == list(range(1000))
    assert set(rows.column("name").to_pylist()) == {f"p{i}" for i in range(1000)}


def test_without_a_source_the_tables_rows_are_numbered(zerobus_local):
    with local(zerobus_local) as sink:
        sink.send(T, batch(0, 10))
        sink.send(T, batch(10, 5))
        sink.flush()
        assert sink.committed() == {(T, 0): 14}


def test_schema_drift_adds_a_column(zerobus_local):
    with local(zerobus_local) as sink:
        sink.send(T, batch(0, 10), source=(0, 9))
        wider = pa.RecordBatch.from_pydict(
            {**batch(10, 10).to_pydict(), "amount": pa.array([1.5] * 10, pa.float64())}
        )
        sink.send(T, wider, source=(0, 19))
        sink.flush()
        assert sink.committed() == {(T, 0): 19}
    zerobus_local.stop()
    rows = zerobus_local.table(T)
    assert "amount" in rows.column_names
    amounts = {r["id"]: r["amount"] for r in rows.to_pylist()}
    assert [amounts[i] for i in range(10)] == [None] * 10
    assert [amounts[i] for i in range(10, 20)] == [1.5] * 10


def test_the_asyncio_variant_awaits_sends_and_confirmations(zerobus_local):
    async def run():
        sink = await zerobus_sink.AsyncSink.open(
            zerobus_local.endpoint,
            [T],
            catalog={"backend": "local", "root": str(zerobus_local.tables)},
        )
        async with sink:
            await sink.send(T, batch(0, 10), source=(0, 9))
            p = await sink.next_confirmation(timeout=30)
            await sink.flush()
        return p

    p = asyncio.run(run())
    assert p == zerobus_sink.Position(T, 0, 9)
    zerobus_local.stop()
    assert sorted(zerobus_local.table(T).column("id").to_pylist()) == list(range(10))


def test_concurrent_sends_from_threads_and_tasks(zerobus_local):
    import concurrent.futures

    with local(zerobus_local) as sink:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            sends = pool.map(lambda i: sink.send(T, batch(i * 10, 10), source=("orders", i, 9)), range(8))
            assert sum(sends) == 80

        async def gather():
            s = zerobus_sink.AsyncSink(sink)
            await asyncio.gather(*(s.send(T, batch(80 + i * 10, 10)) for i in range(8)))

        asyncio.run(gather())
        sink.flush()
        committed = sink.committed()
    # Eight partitions of topic "orders", and the table's own numbering of the rows sent
    # without a position (80 rows from eight tasks at once: positions 0..79).
    assert committed == {**{("orders", i): 9 for i in range(8)}, (T, 0): 79}
    zerobus_local.stop()
    assert sorted(zerobus_local.table(T).column("id").to_pylist()) == list(range(160))
