"""Load Parquet files into a table through zerobus-sink, with a progress bar and a summary.

Against zerobus-local (tables provisioned by the local catalog under --tables-root)::

    zerobus-local --tables ./lake &
    python examples/load_parquet.py --endpoint http://127.0.0.1:50051 \\
        --tables-root ./lake --table main.bronze.orders orders/*.parquet

Against Databricks, give the settings file instead (credentials by environment variable)::

    python examples/load_parquet.py --settings sink.toml --table main.bronze.orders orders/*.parquet

Each batch's source position is (file, 0, last row number in the file): a rerun of the same
files can tell from ``sink.committed()`` how far each file is durable.
"""

from __future__ import annotations

import argparse
import sys
import time

import pyarrow.parquet as pq

import zerobus_sink


def bar(done: int, durable: int, total: int, started: float) -> str:
    width = 30
    filled = int(width * durable / total) if total else width
    sent = int(width * done / total) if total else width
    cells = "#" * filled + "+" * max(0, sent - filled) + "." * (width - max(sent, filled))
    rate = durable / max(time.monotonic() - started, 1e-9)
    return f"\r[{cells}] {durable:,}/{total:,} rows durable ({done:,} sent), {rate:,.0f} rows/s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="Parquet files")
    ap.add_argument("--table", required=True, help="catalog.schema.table")
    ap.add_argument("--endpoint", help="the Zerobus endpoint (with --tables-root)")
    ap.add_argument("--tables-root", help="the local catalog's root (zerobus-local --tables)")
    ap.add_argument("--settings", help="a settings file instead of --endpoint/--tables-root")
    ap.add_argument("--batch-rows", type=int, default=10_000, help="rows per batch sent")
    args = ap.parse_args()

    files = [pq.ParquetFile(f) for f in args.files]
    total = sum(f.metadata.num_rows for f in files)
    if args.settings:
        sink = zerobus_sink.Sink.from_file(args.settings)
    elif args.endpoint and args.tables_root:
        sink = zerobus_sink.Sink(
            args.endpoint,
            tables=[args.table],
            catalog={"backend": "local", "root": args.tables_root},
        )
    else:
        ap.error("give --settings, or --endpoint with --tables-root")

    started = time.monotonic()
    sent = 0
    last_draw = 0.0

    def durable() -> int:
        return sum(o + 1 for (topic, _), o in sink.committed().items() if topic in args.files)

    try:
        with sink:
            for name, f in zip(args.files, files):
                row = 0
                for batch in f.iter_batches(batch_size=args.batch_rows):
                    row += batch.num_rows
                    sent += sink.send(args.table, batch, source=(name, 0, row - 1))
                    if time.monotonic() - last_draw > 0.2:
                        print(bar(sent, durable(), total, started), end="", file=sys.stderr)
                        last_draw = time.monotonic()
            sink.flush()
            print(bar(sent, durable(), total, started), file=sys.stderr)
            summary = sink.close()
    except zerobus_sink.DeliveryError as e:
        print(f"\n{e}", file=sys.stderr)
        for f in e.failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    except zerobus_sink.ZerobusSinkError as e:
        print(f"\n{type(e).__name__}: {e}", file=sys.stderr)
        return 2

    elapsed = time.monotonic() - started
    print(f"files:    {len(files)}")
    print(f"rows:     {summary['rows']:,} durable of {total:,} read")
    print(f"elapsed:  {elapsed:.1f} s ({summary['rows'] / max(elapsed, 1e-9):,.0f} rows/s)")
    print(f"table:    {args.table}")
    print(f"failures: {summary['failed_batches']}")
    return 0 if summary["rows"] == total else 1


if __name__ == "__main__":
    sys.exit(main())
