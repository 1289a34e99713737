"""Land Arrow batches durably in Databricks Delta tables through Zerobus.

A :class:`Sink` takes pyarrow ``RecordBatch``/``Table``/``RecordBatchReader``, polars
``DataFrame`` and anything else that exports the Arrow PyCapsule interface, without a copy in
Python, and confirms source positions only once their rows are durable::

    import pyarrow as pa
    import zerobus_sink

    with zerobus_sink.Sink(
        "http://127.0.0.1:50051",
        tables=["main.bronze.orders"],
        catalog={"backend": "local", "root": "/tmp/lake"},
    ) as sink:
        sink.send("main.bronze.orders", batch, source=(0, 41))  # partition 0, offset 41
        for p in sink.confirmations(timeout=0):
            consumer.commit(p.partition, p.offset)              # durable through p.offset

The import name is ``zerobus_sink``; Databricks' own SDK is ``zerobus``.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from . import _native
from ._settings import TableArg, to_toml
from .errors import (
    BadRowsError,
    ClosedError,
    ConfigError,
    DeliveryError,
    Failure,
    InputError,
    SchemaError,
    SendError,
    SourceError,
    ZerobusSinkError,
)

__all__ = [
    "AsyncSink",
    "BadRowsError",
    "ClosedError",
    "ConfigError",
    "DeliveryError",
    "Failure",
    "InputError",
    "Position",
    "SchemaError",
    "SendError",
    "Sink",
    "SourceError",
    "ZerobusSinkError",
]

__version__: str = _native.__version__

_log = logging.getLogger("zerobus_sink")

# The sink's log records stop before the interpreter finalizes (see _native.stop_logs).
atexit.register(_native.stop_logs)

Source = Union[Tuple[int, int], Tuple[str, int, int]]


class Position(NamedTuple):
    """A committed source position: every record of ``topic``/``partition`` up to and
    including ``offset`` is durable in every table it was sent to."""

    topic: str
    partition: int
    offset: int


class Sink:
    """A sink: batches in, durable source positions out.

    Args:
        endpoint: ``https://<workspace-id>.zerobus.<region>.cloud.databricks.com``, or
            ``http://127.0.0.1:50051`` for zerobus-local.
        tables: table names (``catalog.schema.table``) or settings per table, as the settings
            file's ``[[table]]`` (``{"name": ..., "streams": 4, "bad_rows": "isolate"}``); a
            ``"schema"`` entry (a pyarrow ``Schema``) gives a table's schema.
        schemas: schemas by table name. With a ``catalog``, a table without one takes its
            schema from its batches (and is created or evolved to fit them).
        credentials, catalog, window, retry, resubmit, timeouts, shutdown: the settings file's
            sections, as dicts (docs/configuration.md). Secrets are named by environment
            variable (``client_secret_env``), never given inline.
        **settings: the settings file's ``[sink]`` keys (``compression="lz4"``,
            ``max_open_streams=16``, ...).

    Raises:
        ConfigError: a setting refused, naming its key; or the sink could not start.
    """

    def __init__(
        self,
        endpoint: str,
        tables: Sequence[TableArg],
        *,
        schemas: Optional[Mapping[str, Any]] = None,
        credentials: Optional[Mapping[str, Any]] = None,
        catalog: Optional[Mapping[str, Any]] = None,
        window: Optional[Mapping[str, Any]] = None,
        retry: Optional[Mapping[str, Any]] = None,
        resubmit: Optional[Mapping[str, Any]] = None,
        timeouts: Optional[Mapping[str, Any]] = None,
        shutdown: Optional[Mapping[str, Any]] = None,
        **settings: Any,
    ) -> None:
        sections = {
            "credentials": credentials,
            "catalog": catalog,
            "window": window,
            "retry": retry,
            "resubmit": resubmit,
            "timeouts": timeouts,
            "shutdown": shutdown,
        }
        text, carried = to_toml(endpoint, tables, sections, settings)
        self._native = _native.NativeSink(text, {**carried, **dict(schemas or {})})

    @classmethod
    def from_toml(cls, text: str, schemas: Optional[Mapping[str, Any]] = None) -> "Sink":
        """A sink from the text of a settings file (the same file the Rust sink and
        ``zerobus-sinkctl`` read)."""
        sink = cls.__new__(cls)
        sink._native = _native.NativeSink(text, dict(schemas or {}))
        return sink

    @classmethod
    def from_file(cls, path: str, schemas: Optional[Mapping[str, Any]] = None) -> "Sink":
        """A sink from a settings file."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"settings file {path}: {e.strerror}", code="config") from e
        return cls.from_toml(text, schemas)

    @property
    def tables(self) -> List[str]:
        """The tables' names."""
        return self._native.tables

    def send(self, table: str, data: Any, source: Optional[Source] = None) -> int:
        """Hands ``data`` to ``table`` and returns as soon as it is accepted (blocking only
        while the window is full: the backpressure), with the GIL released.

        Args:
            table: one of the sink's tables.
            data: a pyarrow ``RecordBatch``, ``Table`` or ``RecordBatchReader``, a polars
                ``DataFrame``, or any object with ``__arrow_c_array__`` or
                ``__arrow_c_stream__``. A stream is read as it is sent.
            source: the position of the last source record in ``data``: ``(partition,
                offset)`` (the topic is the table's name) or ``(topic, partition, offset)``.
                Positions must rise per partition. Without one, the table's rows are numbered
                (topic: the table, partition 0, offset: the row's number).

        Returns:
            The rows handed over.

        Raises:
            InputError: not Arrow data. SchemaError, BadRowsError, SendError: refused, nothing
            sent (send again with the same ``source`` once fixed). SourceError: a position not
            after the previous one. ClosedError: the sink is closed.
        """
        return self._native.send(table, data, source)

    def flush(self) -> None:
        """Waits until everything sent is durable or handed back.

        Raises:
            DeliveryError: batches handed back since the previous flush (``failures``).
        """
        self._native.flush()

    def close(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Drains for up to ``timeout`` seconds (``shutdown.drain``, 30 s by default), then
        stops. Returns the summary: ``rows``, ``batches``, ``failed_batches``, ``elapsed``,
        ``text``.

        Raises:
            DeliveryError: rows handed back, not durable (``failures``).
        """
        return self._native.close(timeout)

    def confirmations(self, timeout: Optional[float] = None) -> Iterator[Position]:
        """Committed positions as they advance (the latest per partition). Ends when the sink
        closes, or when nothing new came for ``timeout`` seconds (``0``: only what is ready)."""
        while True:
            p = self._native.next_confirmation(timeout)
            if p is None:
                return
            yield Position(*p)

    def committed(self) -> Dict[Tuple[str, int], int]:
        """Every partition's committed position: ``{(topic, partition): offset}``."""
        return self._native.committed()

    def failures(self) -> List[Failure]:
        """Every batch or row set handed back so far, with its rows."""
        return self._native.failures()

    def progress(self) -> Optional[Dict[str, Any]]:
        """Rows and batches durable so far (``None`` once closed)."""
        return self._native.progress()

    def __enter__(self) -> "Sink":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except ZerobusSinkError as e:
            _log.error("while closing after %s: %s", exc_type.__name__, e)

    def __repr__(self) -> str:
        return f"Sink(endpoint={self._native.endpoint!r}, tables={self.tables!r})"


class AsyncSink:
    """The asyncio variant of :class:`Sink`: the same sink, its waits awaited on a worker
    thread (the GIL released there). A cancelled ``send`` either never handed its batch over
    or hands it over in full; either way no position is confirmed before it is durable."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink

    @classmethod
    async def open(cls, endpoint: str, tables: Sequence[TableArg], **kwargs: Any) -> "AsyncSink":
        """Starts a sink (the arguments of :class:`Sink`) without blocking the loop."""
        return cls(await asyncio.to_thread(Sink, endpoint, tables, **kwargs))

    @property
    def sink(self) -> Sink:
        """The synchronous sink underneath."""
        return self._sink

    async def send(self, table: str, data: Any, source: Optional[Source] = None) -> int:
        """:meth:`Sink.send`, awaited."""
        return await asyncio.to_thread(self._sink.send, table, data, source)

    async def flush(self) -> None:
        """:meth:`Sink.flush`, awaited."""
        await asyncio.to_thread(self._sink.flush)

    async def close(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """:meth:`Sink.close`, awaited."""
        return await asyncio.to_thread(self._sink.close, timeout)

    async def next_confirmation(self, timeout: Optional[float] = None) -> Optional[Position]:
        """The next committed position, awaited (``None`` if the sink closed or ``timeout``
        passed)."""
        p = await asyncio.to_thread(self._sink._native.next_confirmation, timeout)
        return None if p is None else Position(*p)

    async def confirmations(self, timeout: Optional[float] = None) -> AsyncIterator[Position]:
        """:meth:`Sink.confirmations` as an async iterator."""
        while True:
            p = await self.next_confirmation(timeout)
            if p is None:
                return
            yield p

    async def __aenter__(self) -> "AsyncSink":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            await self.close()
            return
        try:
            await self.close()
        except ZerobusSinkError as e:
            _log.error("while closing after %s: %s", exc_type.__name__, e)
