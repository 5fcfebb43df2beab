"""Running one command for `run_compact_command`: where, how, for how long, and what it holds.

Boundary: a command line in, a `Run` out (status, exit code, duration, the bytes kept). The
policy is the caller's (workspace root, shell or not, timeout, bytes held), passed in:

- the command is an argument list (a string is split as a POSIX shell would, `shlex`), run
  without a shell unless the caller allows one (`/bin/sh -c`);
- `cwd` must resolve (after `..` and symlinks, `os.path.realpath`) inside the workspace root,
  and the command runs in that resolved folder, so a link swapped afterwards changes nothing;
- stdin is closed (`/dev/null`); stdout and stderr are one stream, as an agent's shell tool
  returns them; the server's own `SHRINK_*` variables (its keys among them) are not passed on;
- the command gets its own session (process group); on timeout the whole group is sent SIGTERM,
  then SIGKILL, so its children die with it; children still running when it exits are ended too;
- at most `max_bytes` of output are held: the first half and the last half; what lies between
  is counted (`omitted_bytes`), never kept, however much the command prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal

from proxy.settings import child_environment

CHUNK = 64 * 1024
KILL_GRACE = 1.0  # seconds between SIGTERM and SIGKILL of a timed-out group
LINGER = 0.5  # seconds output may still arrive after the command exited (its children's)
POLL = 0.05  # seconds between looks at whether the command exited

Status = Literal["ok", "failed", "timeout", "error"]


class Refused(ValueError):
    """The command or its cwd is not allowed; the message says why."""


@dataclass(frozen=True)
class Run:
    status: Status  # ok: exit 0; failed: another exit; timeout: killed; error: did not start
    exit_code: int | None  # the shell convention for a signal: -N
    duration: float
    head: bytes
    tail: bytes
    total_bytes: int
    error: str | None = None
    killed_children: bool = False  # the group still had processes after the command ended

    @property
    def omitted_bytes(self) -> int:
        return self.total_bytes - len(self.head) - len(self.tail)


def resolve_cwd(root: str, cwd: str | None) -> str:
    """The real folder `cwd` names (relative to `root`), refused unless inside `root`."""
    real_root = os.path.realpath(root)
    if not cwd:
        return real_root
    target = os.path.realpath(os.path.join(real_root, os.path.expanduser(cwd)))
    if target != real_root and not target.startswith(real_root.rstrip(os.sep) + os.sep):
        raise Refused(f"cwd {cwd!r} is outside the workspace root {real_root}")
    if not os.path.isdir(target):
        raise Refused(f"cwd {cwd!r} is not a folder")
    return target


def argv_of(command: str | list[str], shell: bool) -> list[str]:
    """The argument list to execute: `command` itself, split, or handed to /bin/sh."""
    if isinstance(command, list):
        if not command or not all(isinstance(a, str) for a in command):
            raise Refused("command must be a non-empty list of strings")
        return ["/bin/sh", "-c", shlex.join(command)] if shell else list(command)
    if not command.strip():
        raise Refused("command is empty")
    if shell:
        return ["/bin/sh", "-c", command]
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise Refused(f"cannot split the command: {exc}") from None
    return argv


class Capture:
    """The head and the tail of a byte stream, `max_bytes` in all; the middle only counted."""

    def __init__(self, max_bytes: int) -> None:
        self.head_room = max_bytes // 2
        self.tail_room = max_bytes - self.head_room
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_room - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= self.tail_room:
            self.tail_size -= len(self.tail.popleft())

    def tail_bytes(self) -> bytes:
        joined = b"".join(self.tail)
        return joined[max(0, len(joined) - self.tail_room) :]


async def run(argv: list[str], cwd: str, seconds: float, max_bytes: int) -> Run:
    """Run `argv` in `cwd` (already resolved), for at most `seconds`."""
    began = time.monotonic()
    capture = Capture(max_bytes)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=child_environment(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except FileNotFoundError:
        return _failed_start(began, f"command not found: {argv[0]}")
    except PermissionError:
        return _failed_start(began, f"not executable: {argv[0]}")
    except OSError as exc:
        return _failed_start(began, f"cannot run {argv[0]}: {exc.strerror or exc}")
    assert proc.stdout is not None
    reader = asyncio.create_task(_pump(proc.stdout, capture))
    timed_out = lingering = False
    try:
        async with asyncio.timeout(seconds):
            # Until the end of output, or the command's own exit and a moment for what its
            # children still print (asyncio's wait() would wait for every holder of the pipe).
            while not reader.done():
                await asyncio.wait({reader}, timeout=POLL)
                if proc.returncode is not None and not reader.done():
                    done, _ = await asyncio.wait({reader}, timeout=LINGER)
                    lingering = not done
                    break
    except TimeoutError:
        timed_out = True
    finally:
        # The group outlives its leader while any member is alive: end them all.
        alive = await _end_group(proc.pid, graceful=timed_out)
        if not reader.done():
            await asyncio.wait({reader}, timeout=KILL_GRACE)
        if not reader.done():  # a process that left the group still holds the pipe
            reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        if proc.returncode is None:  # killed by now; wait() also waits for the pipe
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), KILL_GRACE)
    code = proc.returncode
    status: Status = "timeout" if timed_out else "ok" if code == 0 else "failed"
    return Run(
        status,
        None if timed_out else code,
        time.monotonic() - began,
        bytes(capture.head),
        capture.tail_bytes(),
        capture.total,
        error=f"timed out after {seconds:g} s; its process group was killed" if timed_out else None,
        killed_children=not timed_out and (alive or lingering),
    )


async def _pump(stream: asyncio.StreamReader, capture: Capture) -> None:
    while chunk := await stream.read(CHUNK):
        capture.add(chunk)


async def _end_group(pgid: int, graceful: bool) -> bool:
    """SIGTERM (when `graceful`), then SIGKILL, to the process group; whether it had members."""
    if not _signal(pgid, signal.SIGTERM if graceful else 0):
        return False
    if graceful:
        deadline = time.monotonic() + KILL_GRACE
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if not _signal(pgid, 0):
                return True
    _signal(pgid, signal.SIGKILL)
    return True


def _signal(pgid: int, sig: int) -> bool:
    """Send `sig` to the group (0: only test it); False when the group has no process left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed its uid (setuid): nothing more we may do
        return False
    return True


def _failed_start(began: float, why: str) -> Run:
    return Run("error", None, time.monotonic() - began, b"", b"", 0, error=why)
