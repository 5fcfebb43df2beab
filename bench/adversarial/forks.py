"""A warm worker that forks one process per case, so a case that hangs is killed, not waited for.

Starting an interpreter, importing the proxy and loading an encoding costs ~0.8 s: a fresh
subprocess per case would spend minutes of the smoke run on it. The worker does that once
(`measure.prepare`), then forks a child per job; the child runs `measure.run` and writes its
result to a file, the worker reports the child's pid and then its exit status. The runner
kills a child that outlives its timeout by that pid (SIGKILL: a regex in C never checks for
signals) and carries on with the next case.

A second worker with another PYTHONHASHSEED replays each case: a plan that depends on set or
dict order under string hashing differs there, as it would between two proxy workers.

    python -m bench.adversarial.forks     # the worker: JSON jobs on stdin, events on stdout
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.overhead.procs import ROOT


@dataclass
class Outcome:
    """How one job ended: "ok" (result), "error" (the child's exception), "timeout" or
    "crashed" (killed by a signal or exited without a result: e.g. the OOM killer)."""

    status: str
    seconds: float
    result: dict[str, Any] = field(default_factory=dict)
    detail: str = ""


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, hash_seed: int, log: Path):
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.adversarial.forks"],
                cwd=ROOT,
                env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self._buf = b""
        if self._event(120) is None:
            self.close()
            raise RuntimeError(f"adversarial worker did not start; see {log}")

    def _event(self, timeout: float) -> dict[str, Any] | None:
        """The worker's next line, or None after `timeout` seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise RuntimeError(f"adversarial worker exited; see {self.log}")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)  # type: ignore[no-any-return]

    def run(self, job: dict[str, Any], timeout: float) -> Outcome:
        out = Path(job["out"])
        out.unlink(missing_ok=True)
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()
        started = self._event(60)
        if started is None:
            raise RuntimeError("adversarial worker did not fork")
        t0 = time.monotonic()
        done = self._event(timeout)
        seconds = time.monotonic() - t0
        if done is None:
            os.kill(started["pid"], signal.SIGKILL)
            self._event(60)
            return Outcome("timeout", seconds, detail=f"killed after {timeout:g} s")
        if not out.exists():
            return Outcome("crashed", seconds, detail=f"exit status {done['exit']}")
        result = json.loads(out.read_bytes())
        if "error" in result:
            return Outcome("error", seconds, result, f"{result['error']}: {result['message']}")
        return Outcome("ok", seconds, result)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _child(job: dict[str, Any]) -> None:
    from bench.adversarial import measure

    code = 0
    try:
        result = measure.run(job)
    except BaseException as e:  # a bench bug: reported like a case's error
        result = {"error": type(e).__name__, "message": str(e)[:300], "where": "bench"}
        code = 1
    tmp = Path(job["out"] + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(job["out"])
    os._exit(code)


def _write(proto: IO[str], event: dict[str, Any]) -> None:
    proto.write(json.dumps(event) + "\n")
    proto.flush()


def serve() -> None:
    # The protocol keeps the real stdout; whatever the pipeline prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from bench.adversarial import measure

    measure.prepare()
    if threading.active_count() != 1:
        raise RuntimeError("a thread is running: a fork would lose it mid-work")
    gc.collect()
    gc.freeze()  # the children's collections skip these objects, not write to their pages
    _write(proto, {"ready": True})
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(job)
        _write(proto, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _write(proto, {"pid": pid, "exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
