"""The exceptions the sink raises, and the record of rows it handed back.

Every exception derives from :class:`ZerobusSinkError` and carries ``table``, ``column``,
``code`` and ``retryable``. No message carries a secret: credentials are read from the
environment by name and never repeated.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple


class ZerobusSinkError(Exception):
    """Base class of everything the sink raises.

    Attributes:
        table: the table concerned, if one is.
        column: the first column concerned, if one is.
        code: a short stable code (``"config"``, ``"bad_rows"``, ``"unreconcilable"``, ...).
        retryable: whether the same call may succeed later unchanged.
    """

    def __init__(
        self,
        message: str,
        *,
        table: Optional[str] = None,
        column: Optional[str] = None,
        code: str = "error",
        retryable: bool = False,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.table = table
        self.column = column
        self.code = code
        self.retryable = retryable
        for key, value in extra.items():
            setattr(self, key, value)


class ConfigError(ZerobusSinkError):
    """A setting refused (the key named), or a sink that could not start."""


class InputError(ZerobusSinkError, TypeError):
    """Not Arrow data, or Arrow data that cannot be read. Nothing was sent."""


class SendError(ZerobusSinkError):
    """A batch not admitted (unknown table, empty, too large). Nothing was sent.

    ``source`` is the position ``(topic, partition, offset)`` the batch was sent under (absent
    for an unknown table): send it again with ``source=error.source`` once fixed. Until then
    that partition's committed position stays below it, since its rows are not durable."""

    source: Tuple[str, int, int]


class SchemaError(SendError):
    """The batch's schema cannot be written to the table. ``columns`` names every column
    concerned (for ``code == "unreconcilable"``). Nothing was sent."""

    columns: List[str]


class BadRowsError(SendError):
    """Rows the table would refuse (a null in a NOT NULL column, a value that does not fit).
    ``rows`` are their indexes in the batch. Nothing of the batch was sent; fix or drop the
    rows and send again with the same source position."""

    rows: List[int]


class SourceError(ZerobusSinkError):
    """A source position that is not after the previous one of its partition."""


class ClosedError(ZerobusSinkError):
    """The sink is closed."""


class DeliveryError(ZerobusSinkError):
    """Batches handed back: not durable after every retry, or rows refused by the ``isolate``
    policy. ``failures`` lists them, with their rows; their source positions were never
    confirmed."""

    failures: List["Failure"]


class Failure:
    """Rows the sink handed back.

    Attributes:
        table: the table.
        kind: ``"not_durable"`` (retries exhausted or the sink closed first) or ``"refused"``
            (the table's ``bad_rows = "isolate"`` policy).
        reason: why, in words.
        source: the source position ``(topic, partition, offset)`` of their batch.
        durable_rows: rows of the batch already durable (a prefix), not included in ``rows``.
        rows: the rows, as Arrow: ``pyarrow.record_batch(failure.rows)``.
    """

    def __init__(
        self,
        *,
        table: str,
        kind: str,
        reason: str,
        source: Tuple[str, int, int],
        durable_rows: int,
        rows: Any,
    ) -> None:
        self.table = table
        self.kind = kind
        self.reason = reason
        self.source = source
        self.durable_rows = durable_rows
        self.rows = rows

    def __repr__(self) -> str:
        return (
            f"Failure(table={self.table!r}, kind={self.kind!r}, rows={len(self.rows)}, "
            f"source={self.source!r}, reason={self.reason!r})"
        )
