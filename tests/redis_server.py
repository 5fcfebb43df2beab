"""A real `redis-server` for the shared-store tests, on a free loopback port, in its own process.

Started by the tests themselves (no service to set up): Debian's `redis-server` package, which
.ci/run installs. Tests using it carry the `redis` marker, so where the binary is missing they
skip on a developer's machine and fail in CI (tests/conftest.py). Nothing is persisted (no RDB,
no AOF) and it listens on 127.0.0.1 only. `kill()` is a SIGKILL, as a crash or an OOM kill would
be; `start()` again brings it back on the same port, empty.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from tests.proxy_process import free_port

BINARY = shutil.which("redis-server")


class RedisServer:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory()

    def start(self, timeout: float = 10.0) -> None:
        assert BINARY is not None
        argv = [BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", self._dir.name, "--protected-mode", "yes"]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            if self.ping():
                return
            time.sleep(0.02)
        raise RuntimeError("redis-server did not answer PING")

    def ping(self) -> bool:
        return self.command(b"PING") == b"+PONG\r\n"

    def command(self, *words: bytes) -> bytes:
        """One command in RESP, the first reply chunk back (b"" when nothing listens)."""
        wire = b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(wire)
                return s.recv(65536)
        except OSError:
            return b""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.kill()
        self._dir.cleanup()


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    if BINARY is None:
        pytest.skip("redis-server not installed (apt-get install redis-server)")
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


class SilentServer:
    """Accepts connections and never answers: a hung Redis (or a wrong port that is open)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)  # held open, never read, never answered

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@contextlib.contextmanager
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()
