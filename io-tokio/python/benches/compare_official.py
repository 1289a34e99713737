"""Our Python package (``zerobus_sink``) against the official Python SDK
(``databricks-zerobus-ingest-sdk``, import ``zerobus``), on the same zerobus-local.

Run (from the repository's root, in a venv holding both packages, pyarrow and deltalake)::

    cargo build --release -p zerobus-sink-testkit --bin zerobus-local
    python io-tokio/python/benches/compare_official.py            # every cell, 6 min here
    python io-tokio/python/benches/compare_official.py --quick    # 1 repetition, fewer rows
    python io-tokio/python/benches/compare_official.py --profile --batch-rows 10000  # one cell
                                            # per client under perf (first of --streams, --batch-rows)

What it measures. Each cell is (compression set, streams, rows per batch):

- compression: ``defaults`` (each client as it comes: ours zstd, the official client
  uncompressed), ``zstd`` (both zstd IPC compression: ours ``compression="zstd"``, the
  official ``ArrowStreamConfigurationOptions(ipc_compression=IPCCompression.ZSTD)``), and
  ``none`` (both uncompressed);
- streams: 1 or 4 (ours: the table's ``streams``, fed by one Python thread calling ``send``;
  the official client: as many stream objects, each fed by its own Python thread);
- rows per batch: 100 or 10,000, rows of ~30 B (int64 id, a 10-character string, float64);
  2 M rows per run at 100-row batches, 6 M at 10,000 (a run takes 1-3 s here).

A run is one client in a fresh Python process against a fresh zerobus-local (its own WAL and
table directories, the table created beforehand with exactly the batches' schema, no
materialization until it stops). The batches are built before the clock starts (compact, not
slices); so are ours' ``Sink`` and the official client's streams. The clock runs from the first
batch handed over to the end of ``flush()`` (every row acked, that is durable in the
emulator's write-ahead log), and so does the CPU count: the client process's user + sys time
(``resource.getrusage``, every thread: Python's, pyarrow's and the Rust runtime's). Then the
emulator is stopped with SIGINT, and its counters must show exactly the run's rows logged and
materialized into the table, with the codec the run asked for: a client that drops or doubles
rows fails the bench instead of winning it.

Reported: rows/s and CPU seconds per MB of Arrow data (``RecordBatch.nbytes``), each client's
median of 3 repetitions (client order alternated, cells interleaved), and the ratios ours /
official (rows/s: above 1.0 is ours faster; CPU per MB: below 1.0 is ours cheaper). ``uptime``
before and after, and the commit.

Knobs: ``ZEROBUS_LOCAL_BIN`` (default ``target/release/zerobus-local``), ``--reps``,
``--sets defaults,zstd,none``, ``--streams 1,4``, ``--batch-rows 100,10000``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[3]
TABLE = "bench.compare.rows"
CLIENTS = ("ours", "official")
ROWS_PER_RUN = {100: 2_000_000, 10_000: 6_000_000}
QUICK_ROWS_PER_RUN = {100: 200_000, 10_000: 500_000}


# ---------------------------------------------------------------------------------------------
# The data: the same compact batches for both clients.


def schema():
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("name", pa.string()), ("value", pa.float64())])


def make_batches(total: int, batch_rows: int):
    """``total // batch_rows`` batches, each with its own buffers (read back from IPC), so that
    neither client is handed slices of a larger batch."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(range(total), pa.int64())
    names = pc.binary_join_element_wise("user-", pc.cast(pc.add(pc.bit_wise_and(ids, 65535), 10000), pa.string()), "")
    values = pc.random(total)
    table = pa.table([ids, names, values], schema=schema())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        for b in table.to_batches(max_chunksize=batch_rows):
            w.write_batch(b)
    batches = list(pa.ipc.open_stream(sink.getvalue()))
    assert sum(b.num_rows for b in batches) == total
    return batches


# ---------------------------------------------------------------------------------------------
# One run of one client, in a child process (so that neither client's threads, caches or heap
# are in the other's count).


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


PROFILE: Dict[str, Any] = {}  # with --profile: perf's output path, then its process and fifos


def begin() -> Tuple[float, float]:
    """The clock's start. With --profile, ``perf record`` attached to this process (every
    thread), started disabled and enabled here through its control fifo (its ack is the event),
    so that it samples the timed run only, not the setup."""
    if PROFILE.get("path"):
        d = tempfile.mkdtemp(prefix="zb-perf-")
        ctl, ack = os.path.join(d, "ctl"), os.path.join(d, "ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        PROFILE["proc"] = subprocess.Popen(
            ["perf", "record", "-F", "1999", "-D", "-1", "--control", f"fifo:{ctl},{ack}",
             "-p", str(os.getpid()), "-o", PROFILE["path"], "-q"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        PROFILE["ctl"], PROFILE["ack"] = open(ctl, "w"), open(ack)
        PROFILE["ctl"].write("enable\n")
        PROFILE["ctl"].flush()
        if PROFILE["ack"].readline().strip() != "ack":
            raise RuntimeError("perf did not enable")
    return cpu_seconds(), time.perf_counter()


def end() -> Tuple[float, float]:
    t1, c1 = time.perf_counter(), cpu_seconds()
    perf = PROFILE.pop("proc", None)
    if perf is not None:
        PROFILE["ctl"].write("disable\n")
        PROFILE["ctl"].flush()
        PROFILE["ack"].readline()
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=120)
    return t1, c1


def run_ours(endpoint: str, batches, streams: int, compression: Optional[str]) -> Tuple[float, float]:
    import zerobus_sink

    settings: Dict[str, Any] = {}
    if compression is not None:
        settings["compression"] = compression
    sink = zerobus_sink.Sink(
        endpoint, tables=[{"name": TABLE, "streams": streams}], schemas={TABLE: schema()}, **settings
    )
    try:
        c0, t0 = begin()
        for b in batches:
            sink.send(TABLE, b)
        sink.flush()
        t1, c1 = end()
    finally:
        sink.close()
    return t1 - t0, c1 - c0


def run_official(endpoint: str, batches, streams: int, compression: Optional[str]) -> Tuple[float, float]:
    from zerobus.sdk.shared.arrow import ArrowStreamConfigurationOptions, IPCCompression
    from zerobus.sdk.sync import HeadersProvider, ZerobusSdk

    class Bearer(HeadersProvider):
        def get_headers(self):
            return [("authorization", "Bearer bench")]

    options = None
    if compression is not None:
        codec = {"zstd": IPCCompression.ZSTD, "lz4": IPCCompression.LZ4_FRAME, "none": IPCCompression.NONE}
        options = ArrowStreamConfigurationOptions(ipc_compression=codec[compression])
    sdk = ZerobusSdk(endpoint, endpoint)
    objs = [sdk.create_arrow_stream_with_headers_provider(TABLE, schema(), Bearer(), options) for _ in range(streams)]
    errors: List[BaseException] = []

    def feed(stream, mine) -> None:
        try:
            for b in mine:
                stream.ingest_batch(b)
            stream.flush()
        except BaseException as e:  # reported by the parent thread
            errors.append(e)

    try:
        c0, t0 = begin()
        if streams == 1:
            feed(objs[0], batches)
        else:
            threads = [threading.Thread(target=feed, args=(s, batches[i::streams])) for i, s in enumerate(objs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        t1, c1 = end()
    finally:
        for s in objs:
            s.close()
    if errors:
        raise errors[0]
    return t1 - t0, c1 - c0


def child(spec: Dict[str, Any]) -> None:
    PROFILE["path"] = spec.get("profile")
    batches = make_batches(spec["rows"], spec["batch_rows"])
    nbytes = sum(b.nbytes for b in batches)
    run = run_ours if spec["client"] == "ours" else run_official
    wall, cpu = run(spec["endpoint"], batches, spec["streams"], spec["compression"])
    print(json.dumps({"wall": wall, "cpu": cpu, "nbytes": nbytes, "rows": spec["rows"]}), flush=True)


# ---------------------------------------------------------------------------------------------
# The emulator: a fresh one per run.


def binary() -> str:
    path = pathlib.Path(os.environ.get("ZEROBUS_LOCAL_BIN", ROOT / "target" / "release" / "zerobus-local"))
    if not path.exists():
        sys.exit(f"no zerobus-local at {path}: cargo build --release -p zerobus-sink-testkit --bin zerobus-local")
    return str(path)


def make_template(where: pathlib.Path) -> pathlib.Path:
    """A plain Delta table of exactly the batches' schema (no sink columns), to copy per run."""
    import deltalake
    import pyarrow as pa

    root = where / "template"
    deltalake.write_deltalake(str(root.joinpath(*TABLE.split("."))), pa.table({f.name: pa.array([], f.type) for f in schema()}, schema=schema()))
    return root


class Emulator:
    def __init__(self, workdir: pathlib.Path, template: pathlib.Path) -> None:
        shutil.copytree(template, workdir / "tables")
        self.proc = subprocess.Popen(
            [
                binary(),
                "--addr", "127.0.0.1:0",
                "--tables", str(workdir / "tables"),
                "--wal-dir", str(workdir / "wal"),
                "--materialize-lag-ms", "3600000",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # its first line says where it listens: no sleep
        if "listening on http://" not in line:
            raise RuntimeError(f"zerobus-local did not start: {line}{self.proc.stdout.read()}")
        self.endpoint = "http://" + line.split("listening on http://", 1)[1].split()[0]

    def stop(self) -> Dict[str, Any]:
        """SIGINT: it materializes what it logged and prints its counters."""
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=300)
        if self.proc.returncode != 0:
            raise RuntimeError(f"zerobus-local exit {self.proc.returncode}: {out}")

        def count(key: str) -> int:
            m = re.search(rf"^\s+{key}: (\d+),$", out, re.M)
            if not m:
                raise RuntimeError(f"no {key} in zerobus-local's counters: {out}")
            return int(m.group(1))

        codecs = dict(re.findall(r'^\s+"(\w+)": (\d+),$', out.split("codecs:", 1)[1].split("}", 1)[0], re.M))
        return {
            "rows": count("rows"),
            "materialized_rows": count("materialized_rows"),
            "errors": count("errors"),
            "codecs": {k: int(v) for k, v in codecs.items()},
        }

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def one_run(
    client: str, streams: int, batch_rows: int, rows: int, compression: Optional[str], expect_codec: str,
    template: pathlib.Path, profile_to: Optional[str] = None,
) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="zb-bench-") as tmp:
        emulator = Emulator(pathlib.Path(tmp), template)
        try:
            spec = {
                "client": client, "streams": streams, "batch_rows": batch_rows, "rows": rows,
                "compression": compression, "endpoint": emulator.endpoint, "profile": profile_to,
            }
            done = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(spec)],
                capture_output=True, text=True,
            )
            if done.returncode != 0:
                raise RuntimeError(f"{client} failed: {done.stdout}{done.stderr}")
            result = json.loads([l for l in done.stdout.splitlines() if l.startswith("{")][-1])
            stats = emulator.stop()
        finally:
            emulator.kill()
    # Every row in the log and in the table, once; sent with the codec asked for.
    if stats["rows"] != rows or stats["materialized_rows"] != rows or stats["errors"]:
        raise RuntimeError(f"{client}: {rows} rows sent, emulator counted {stats}")
    if set(stats["codecs"]) != {expect_codec}:
        raise RuntimeError(f"{client}: expected {expect_codec} messages, emulator counted {stats['codecs']}")
    result["messages"] = stats["codecs"][expect_codec]
    return result


# ---------------------------------------------------------------------------------------------
# The parent: cells, repetitions, medians, ratios.

# compression set -> client -> (setting passed, codec the emulator must see)
SETS: Dict[str, Dict[str, Tuple[Optional[str], str]]] = {
    "defaults": {"ours": (None, "zstd"), "official": (None, "none")},
    "zstd": {"ours": ("zstd", "zstd"), "official": ("zstd", "zstd")},
    "none": {"ours": ("none", "none"), "official": ("none", "none")},
}


def sh(cmd: List[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return "?"


def versions() -> str:
    from importlib.metadata import version

    out = []
    for dist in ("zerobus-sink", "databricks-zerobus-ingest-sdk", "pyarrow"):
        try:
            out.append(f"{dist} {version(dist)}")
        except Exception:
            out.append(f"{dist} ?")
    return ", ".join(out) + f", Python {sys.version.split()[0]}"


def profile(args, template: pathlib.Path) -> None:
    """One cell per client under ``perf record`` (every thread of the client's process, the
    timed run only); prints where its samples fall by library and by function."""
    streams, batch_rows = int(args.streams.split(",")[0]), int(args.batch_rows.split(",")[0])
    comp_set = args.profile_set
    rows = ROWS_PER_RUN[batch_rows]
    out_dir = pathlib.Path(tempfile.mkdtemp(prefix="zb-profile-"))
    for client in CLIENTS:
        data = out_dir / f"{client}.perf.data"
        setting, codec = SETS[comp_set][client]
        r = one_run(client, streams, batch_rows, rows, setting, codec, template, str(data))
        print(f"\n{client}: {comp_set}, {streams} stream, {batch_rows} rows/batch, "
              f"{r['rows'] / r['wall']:,.0f} rows/s and {r['cpu'] / (r['nbytes'] / 1e6) * 1e3:.2f} ms CPU/MB "
              f"under perf ({data})")
        for sort, top in (("comm", 8), ("dso", 10), ("dso,sym", 25)):
            out = sh(["perf", "report", "-i", str(data), "--no-children", "--stdio", "--sort", sort,
                      "--percent-limit", "0.5"])
            lines = [l for l in out.splitlines() if l.strip() and not l.startswith("#")]
            print(f"  by {sort}:")
            for l in lines[:top]:
                print("    " + l.strip()[:150])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="1 repetition, fewer rows")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sets", default="defaults,zstd,none")
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--batch-rows", default="100,10000")
    ap.add_argument("--profile", action="store_true", help="one cell per client under perf")
    ap.add_argument("--profile-set", default="zstd", help="the compression set of the profiled cell")
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0

    with tempfile.TemporaryDirectory(prefix="zb-template-") as tmp:
        template = make_template(pathlib.Path(tmp))
        if args.profile:
            profile(args, template)
            return 0
        reps = 1 if args.quick else args.reps
        per_run = QUICK_ROWS_PER_RUN if args.quick else ROWS_PER_RUN
        sets = args.sets.split(",")
        streams_list = [int(s) for s in args.streams.split(",")]
        batch_list = [int(s) for s in args.batch_rows.split(",")]
        cells = [(s, n, b) for s in sets for n in streams_list for b in batch_list]

        print(f"commit {sh(['git', 'rev-parse', '--short', 'HEAD'])}, {time.strftime('%Y-%m-%d %H:%M')}")
        print(versions())
        print(f"uptime before: {sh(['uptime'])}")
        started = time.monotonic()
        results: Dict[Tuple[str, int, int, str], List[Dict[str, Any]]] = {}
        for rep in range(reps):
            for i, (comp_set, streams, batch_rows) in enumerate(cells):
                order = CLIENTS if (rep + i) % 2 == 0 else CLIENTS[::-1]
                for client in order:
                    setting, codec = SETS[comp_set][client]
                    r = one_run(client, streams, batch_rows, per_run[batch_rows], setting, codec, template)
                    results.setdefault((comp_set, streams, batch_rows, client), []).append(r)
                    print(
                        f"  rep {rep + 1} {comp_set:8} {streams} x {batch_rows:>6} {client:8} "
                        f"{r['rows'] / r['wall']:>12,.0f} rows/s  {r['cpu'] / (r['nbytes'] / 1e6) * 1e3:7.2f} ms CPU/MB  "
                        f"{r['messages']:>6} messages  (rows verified)",
                        flush=True,
                    )
        print(f"uptime after: {sh(['uptime'])}  ({time.monotonic() - started:.0f} s)")

        def med(comp_set: str, streams: int, batch_rows: int, client: str) -> Tuple[float, float]:
            rs = results[(comp_set, streams, batch_rows, client)]
            return (
                statistics.median(r["rows"] / r["wall"] for r in rs),
                statistics.median(r["cpu"] / (r["nbytes"] / 1e6) for r in rs),
            )

        print("\nMedians (rows/s; ms CPU per MB of Arrow data) and ours / official:\n")
        print("| compression | streams | rows/batch | ours rows/s | official rows/s | rows/s ratio "
              "| ours ms CPU/MB | official ms CPU/MB | CPU/MB ratio |")
        print("|---|---|---|---|---|---|---|---|---|")
        for comp_set, streams, batch_rows in cells:
            (ro, co), (rf, cf) = med(comp_set, streams, batch_rows, "ours"), med(comp_set, streams, batch_rows, "official")
            print(f"| {comp_set} | {streams} | {batch_rows:,} | {ro / 1e6:.2f} M | {rf / 1e6:.2f} M | {ro / rf:.2f} "
                  f"| {co * 1e3:.2f} | {cf * 1e3:.2f} | {co / cf:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
