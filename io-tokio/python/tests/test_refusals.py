"""Bad input raises a clear exception, and nothing is lost: the refused batch comes back, the
source position stays where it was, and the same send succeeds once fixed."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

import zerobus_sink
from test_landing import T, batch, local


def test_a_non_arrow_object_is_an_input_error_and_a_type_error(zerobus_local):
    with local(zerobus_local) as sink:
        with pytest.raises(zerobus_sink.InputError) as e:
            sink.send(T, [1, 2, 3], source=(0, 2))
        assert isinstance(e.value, TypeError)
        assert "got list" in str(e.value) and e.value.code == "input"
        # The position was not taken: the same source position goes through.
        sink.send(T, batch(0, 3), source=(0, 2))
        sink.flush()
        assert sink.committed() == {(T, 0): 2}


def test_a_type_the_table_cannot_take_names_the_column_and_the_retry_lands(zerobus_local):
    with local(zerobus_local) as sink:
        sink.send(T, batch(0, 5), source=(0, 4))
        sink.flush()
        bad = pa.RecordBatch.from_pydict({"id": pa.array(["x"] * 5), "name": pa.array(["a"] * 5)})
        with pytest.raises(zerobus_sink.SchemaError) as e:
            sink.send(T, bad, source=(0, 9))
        err = e.value
        assert err.table == T and err.column == "id" and err.columns == ["id"]
        assert err.code == "unreconcilable" and not err.retryable
        assert "id" in str(err) and T in str(err)
        sink.flush()
        assert sink.committed() == {(T, 0): 4}  # nothing past the refused batch
        sink.send(T, batch(5, 5), source=(0, 9))  # the same position, fixed
        sink.flush()
        assert sink.committed() == {(T, 0): 9}
    zerobus_local.stop()
    assert sorted(zerobus_local.table(T).column("id").to_pylist()) == list(range(10))


def test_rows_the_table_refuses_are_named_and_nothing_of_the_batch_is_sent(zerobus_local):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])
    with local(zerobus_local, schemas={}) as sink:
        sink.send(T, pa.record_batch([pa.array([1], pa.int64()), pa.array(["a"])], schema=schema), source=(0, 0))
        sink.flush()
        nulls = pa.RecordBatch.from_pydict({"id": pa.array([2, None, 4], pa.int64()), "name": pa.array(["b", "c", "d"])})
        with pytest.raises(zerobus_sink.BadRowsError) as e:
            sink.send(T, nulls, source=(0, 3))
        assert e.value.rows == [1] and e.value.column == "id" and e.value.table == T
    zerobus_local.stop()
    assert zerobus_local.table(T).column("id").to_pylist() == [1]


def test_a_closed_sink_refuses_with_closed_error(zerobus_local):
    sink = local(zerobus_local)
    sink.close()
    with pytest.raises(zerobus_sink.ClosedError):
        sink.send(T, batch(0, 1), source=(0, 0))
    with pytest.raises(zerobus_sink.ClosedError):
        sink.flush()


def test_a_settings_typo_names_the_key(zerobus_local, tmp_path):
    with pytest.raises(zerobus_sink.ConfigError) as e:
        local(zerobus_local, compresion="zstd")
    assert "sink" in str(e.value) and "compresion" in str(e.value)
    path = tmp_path / "sink.toml"
    path.write_text(
        f'[sink]\nendpoint = "{zerobus_local.endpoint}"\n\n[[table]]\nname = "{T}"\nstreamz = 2\n'
    )
    with pytest.raises(zerobus_sink.ConfigError) as e:
        zerobus_sink.Sink.from_file(str(path))
    assert "table[0]" in str(e.value) and "streamz" in str(e.value)
    with pytest.raises(zerobus_sink.ConfigError) as e:
        zerobus_sink.Sink.from_file(str(tmp_path / "absent.toml"))
    assert "absent.toml" in str(e.value)


def test_an_unknown_table_and_a_position_that_does_not_rise(zerobus_local):
    with local(zerobus_local) as sink:
        with pytest.raises(zerobus_sink.SendError) as e:
            sink.send("main.bronze.nope", batch(0, 1))
        assert e.value.code == "unknown_table" and T in str(e.value)
        sink.send(T, batch(0, 2), source=(0, 10))
        with pytest.raises(zerobus_sink.SourceError) as e:
            sink.send(T, batch(2, 2), source=(0, 10))
        assert "not after the previous read" in str(e.value)


def test_secrets_are_never_in_errors_reprs_or_logs(make_emulator, monkeypatch, caplog):
    secret = "zb-test-secret-Q7x9vL2m"
    monkeypatch.setenv("ZB_SECRET", secret)
    monkeypatch.setenv("ZB_EMULATOR_SECRET", "the-emulators-own-secret")
    emulator = make_emulator(
        "--metrics-addr", "127.0.0.1:0",
        "--oauth-client-id", "pipeline",
        "--oauth-client-secret-env", "ZB_EMULATOR_SECRET",
    )
    caplog.set_level(logging.DEBUG, logger="zerobus_sink")
    sink = zerobus_sink.Sink(
        emulator.endpoint,
        tables=[T],
        catalog={"backend": "local", "root": str(emulator.tables)},
        credentials={
            "kind": "oauth",
            "workspace_url": f"http://{emulator.metrics}",
            "workspace_id": "1",
            "client_id": "pipeline",
            "client_secret_env": "ZB_SECRET",
        },
        retry={"max_attempts": 1, "initial_backoff": "10ms", "max_backoff": "20ms"},
        resubmit={"max_attempts": 0},
    )
    said = [repr(sink)]
    sink.send(T, batch(0, 5), source=(0, 4))
    try:
        sink.flush()
    except zerobus_sink.ZerobusSinkError as e:
        said += [str(e), repr(e)] + [repr(f) for f in e.failures]
    try:
        sink.close(timeout=1)
    except zerobus_sink.ZerobusSinkError as e:
        said += [str(e), repr(e)]
    zerobus_sink._native.flush_logs()
    said += [r.getMessage() for r in caplog.records]
    # It did fail on the secret: the token endpoint refused the client.
    assert any("401" in s or "invalid_client" in s or "nauthorized" in s for s in said), said
    assert not [s for s in said if secret in s]


def test_a_refused_batch_without_a_source_goes_again_under_the_position_it_names(zerobus_local):
    with local(zerobus_local) as sink:
        sink.send(T, batch(0, 5))
        bad = pa.RecordBatch.from_pydict({"id": pa.array(["x"] * 3), "name": pa.array(["a"] * 3)})
        with pytest.raises(zerobus_sink.SchemaError) as e:
            sink.send(T, bad)
        assert e.value.source == (T, 0, 7)
        sink.send(T, batch(8, 2))  # numbered after the refused rows
        sink.flush()
        assert sink.committed() == {(T, 0): 4}  # held below the refused rows
        sink.send(T, batch(5, 3), source=e.value.source)
        sink.flush()
        assert sink.committed() == {(T, 0): 9}
    zerobus_local.stop()
    assert sorted(zerobus_local.table(T).column("id").to_pylist()) == list(range(10))
