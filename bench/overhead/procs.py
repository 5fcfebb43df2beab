"""Server processes: start on a free loopback port, wait until they answer, read CPU and RSS.

CPU is utime+stime from /proc/<pid>/stat (every thread, including the worker threads a large
request is shrunk in), summed over the process and its descendants; RSS is VmRSS. Processes are
stopped by their own handle, never by name.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except OSError:
            continue
    return out


def tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of the process tree rooted at `pid`, in seconds."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / CLK_TCK


def _status_kb(pid: int, field: str) -> int:
    """A /proc/PID/status figure (kB) summed over the process tree."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(field):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS:") / 1024


def reset_peak_rss(pid: int) -> None:
    """Start a new peak: Linux resets VmHWM to the current RSS when "5" is written to
    clear_refs (our own processes). Silently nothing where that is not allowed."""
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            continue


def peak_rss_mb(pid: int) -> float:
    """Largest RSS since the last `reset_peak_rss` (per process, summed over the tree)."""
    return _status_kb(pid, "VmHWM:") / 1024


@dataclass
class Server:
    """A server process under test (or the fake upstream), addressed by name in the report."""

    name: str
    argv: Sequence[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    path: str = "/v1/chat/completions"
    log: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    def start(self, log_dir: Path) -> None:
        self.log = log_dir / f"{self.name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                list(self.argv),
                cwd=ROOT,
                env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait_ready(self, timeout: float) -> None:
        """Until a GET answers with any HTTP status (the process may take seconds to import)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
                    if s.recv(16).startswith(b"HTTP/1."):
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:g}s: {self.tail()}")

    def tail(self, n: int = 2000) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return self.log.read_bytes()[-n:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def python_module(module: str, *args: str, python: str = sys.executable) -> list[str]:
    return [python, "-m", module, *args]
