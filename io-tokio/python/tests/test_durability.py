"""No position is confirmed before its rows are durable, and no row is silently lost: through
zerobus-local killed with ``kill -9`` and restarted mid-stream, a kill it never comes back
from, and Ctrl-C in a send that waits for room."""

from __future__ import annotations

import os
import signal
import threading

import pyarrow as pa
import pytest

import zerobus_sink
from test_landing import T, batch

ROWS = 500


def resilient(emulator, streams: int = 2, **kwargs) -> zerobus_sink.Sink:
    return zerobus_sink.Sink(
        emulator.endpoint,
        tables=[{"name": T, "streams": streams}],
        catalog={"backend": "local", "root": str(emulator.tables)},
        retry={"initial_backoff": "50ms", "max_backoff": "200ms", "max_attempts": 20},
        timeouts={"ack": "5s"},
        **kwargs,
    )


def ids_through(offset: int) -> set:
    """The ids of every batch whose source position is at or below ``offset``."""
    return set(range(offset + 1))


def test_kill9_mid_stream_loses_nothing_and_confirms_nothing_early(zerobus_local):
    sink = resilient(zerobus_local)
    seen = []  # committed positions as the pipeline saw them, during the run
    for i in range(200):
        start = i * ROWS
        sink.send(T, batch(start, ROWS), source=(0, start + ROWS - 1))
        seen += [p.offset for p in sink.confirmations(timeout=0)]
        if i == 60:
            zerobus_local.kill9()
        if i == 61:
            zerobus_local.start()  # same port, same write-ahead log
        if i == 140:
            sink.flush()
            zerobus_local.kill9()  # and never back while the sink runs
    with pytest.raises(zerobus_sink.DeliveryError) as e:
        sink.close(timeout=2)
    failures = e.value.failures
    committed = sink.committed().get((T, 0), -1)
    assert failures and all(f.kind == "not_durable" for f in failures)
    assert 141 * ROWS - 1 <= committed < 200 * ROWS - 1
    zerobus_local.start()
    print(zerobus_local.stop())  # materialises every acked row (its counters shown on failure)
    landed = zerobus_local.table(T).column("id").to_pylist()
    landed_set = set(landed)
    # No confirmation ran ahead of durability: every row at or below each position is there.
    for position in seen + [committed]:
        assert ids_through(position) <= landed_set, (position, sorted(ids_through(position) - landed_set)[:3], len(ids_through(position) - landed_set))
    # Nothing silently lost: each row sent is in the table or handed back.
    handed_back = set()
    for f in failures:
        handed_back |= set(pa.record_batch(f.rows).column("id").to_pylist())
    assert landed_set | handed_back == set(range(200 * ROWS))
    assert max(seen) <= committed


def test_ctrl_c_in_a_send_waiting_for_room_confirms_nothing(make_emulator):
    # Acks a minute late: the one stream's window of 1,000 rows fills with the first batch,
    # the hand-over queue (sink.handoffs) with the next ones, and then a send waits for room.
    emulator = make_emulator("--ack-latency-ms", "60000")
    sink = resilient(emulator, streams=1, window={"max_rows": 1000}, handoffs=4)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    accepted = 0
    try:
        with pytest.raises(KeyboardInterrupt):
            for i in range(100):
                sink.send(T, batch(i * 1000, 1000), source=(0, i * 1000 + 999))
                accepted += 1
    finally:
        timer.cancel()
    assert 1 <= accepted < 100
    assert sink.committed() == {}
    with pytest.raises(zerobus_sink.DeliveryError) as e:
        sink.close(timeout=0.5)
    # Every batch handed over is handed back; the interrupted one never was handed over.
    rows = [pa.record_batch(f.rows).column("id").to_pylist() for f in e.value.failures]
    assert sorted(sum(rows, [])) == list(range(accepted * 1000))
    assert sink.committed() == {}
