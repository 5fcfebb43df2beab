"""Run an ASGI app under a real uvicorn server on 127.0.0.1 in a background thread.

As httpx's own tests do: real sockets, real HTTP, so streaming, time to first byte and
disconnects behave as they do in production (httpx.ASGITransport buffers whole responses).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn


class ThreadedServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # not the main thread
        pass


@contextlib.contextmanager
def serve(app, *, timeout_graceful_shutdown: float = 1.0, **config) -> Iterator[str]:
    """Yield the base URL (http://127.0.0.1:PORT) of `app` served by uvicorn."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    cfg = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=timeout_graceful_shutdown,
        **config,
    )
    server = ThreadedServer(cfg)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
