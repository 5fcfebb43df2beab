"""The proxy as a separate process (`python -m proxy serve`), observed only from outside.

Tests that measure memory, count sockets, send signals or read the log need the real entry point
in its own process: an in-thread server shares the test's heap, signal handlers and log handlers.
What the process holds is read through psutil (RSS, CPU, TCP connections to a given port).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from tests.shared_dir import ROOT, TIKTOKEN_CACHE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ProxyProcess:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path):
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.ps = psutil.Process(proc.pid)
        self._final_log: str | None = None

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def cpu_seconds(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def connections_to(self, port: int) -> int:
        """ESTABLISHED TCP connections from the proxy to `port` (its upstream pool, in use)."""
        return sum(
            1
            for c in self.ps.net_connections(kind="tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        )

    def log(self) -> str:
        """Everything the process wrote so far (kept after it exits)."""
        if self._final_log is not None:
            return self._final_log
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited early with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError("proxy did not become healthy")


@contextlib.contextmanager
def proxy_process(
    upstream_url: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[ProxyProcess]:
    """Run `python -m proxy serve` on a free port; stderr goes to a file read by `.log()`."""
    port = free_port()
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith("SHRINK_") and k != "PYTHONPATH"
    }
    full_env.setdefault("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))
    full_env.update(env or {})
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "proxy.log"
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "proxy", "serve", "--port", str(port)]
                + ["--upstream", upstream_url, *args],
                cwd=tmp,  # no stray .env from the developer's working directory
                env={**full_env, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        running = ProxyProcess(proc, port, log_path)
        try:
            wait_healthy(running.url, proc)
            yield running
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            running._final_log = running.log()
