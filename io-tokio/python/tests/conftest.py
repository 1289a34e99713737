"""zerobus-local over loopback TCP for the tests, and an independent reader (Python
``deltalake``) for what lands in its tables.

The emulator binary is ``$ZEROBUS_LOCAL_BIN``, or the workspace's debug build
(``cargo build -p zerobus-sink-testkit --bin zerobus-local``).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
from typing import Iterator, List, Optional

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _binary() -> str:
    given = os.environ.get("ZEROBUS_LOCAL_BIN")
    path = pathlib.Path(given) if given else ROOT / "target" / "debug" / "zerobus-local"
    if not path.exists():
        pytest.fail(f"no zerobus-local at {path}: build it or set ZEROBUS_LOCAL_BIN")
    return str(path)


class Emulator:
    """One zerobus-local, restartable on the same port and directories."""

    def __init__(self, workdir: pathlib.Path, extra: List[str]) -> None:
        self.workdir = workdir
        self.tables = workdir / "tables"
        self.extra = extra
        self.addr = "127.0.0.1:0"
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://{self.addr}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                _binary(),
                "--addr",
                self.addr,
                "--tables",
                str(self.tables),
                "--wal-dir",
                str(self.workdir / "wal"),
                "--materialize-lag-ms",
                "0",
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # The first line says where it listens: the real event, no sleep.
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on http://" not in line:
            rest = self.proc.stdout.read() if self.proc.poll() is not None else ""
            raise RuntimeError(f"zerobus-local did not start: {line}{rest}")
        self.addr = line.split("listening on http://", 1)[1].split()[0]
        self.metrics = None
        if "--metrics-addr" in self.extra:
            while not line.startswith("metrics: http://"):
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError("zerobus-local did not say where its metrics are")
            self.metrics = line.split("metrics: http://", 1)[1].split("/")[0]

    def kill9(self) -> None:
        """``kill -9``: no chance to flush or materialize."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.proc = None

    def stop(self) -> str:
        """Ctrl-C: it materializes every acked row into the tables, then exits."""
        if self.proc is None:
            return ""
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=60)
        code = self.proc.returncode
        self.proc = None
        if code != 0:
            raise RuntimeError(f"zerobus-local did not stop gracefully (exit {code}): {out}")
        return out

    def table(self, name: str):
        """The table's rows, read by ``deltalake`` (stop the emulator first)."""
        import deltalake

        return deltalake.DeltaTable(str(self.tables.joinpath(*name.split(".")))).to_pyarrow_table()


@pytest.fixture
def zerobus_local(tmp_path: pathlib.Path) -> Iterator[Emulator]:
    emulator = Emulator(tmp_path, [])
    yield emulator
    if emulator.proc is not None:
        emulator.proc.kill()
        emulator.proc.wait()


@pytest.fixture
def make_emulator(tmp_path: pathlib.Path):
    """An emulator with extra flags."""
    made: List[Emulator] = []

    def make(*extra: str) -> Emulator:
        e = Emulator(tmp_path, list(extra))
        made.append(e)
        return e

    yield make
    for e in made:
        if e.proc is not None:
            e.proc.kill()
            e.proc.wait()
