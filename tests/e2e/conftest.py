"""End-to-end fixtures: a real llama.cpp server with a real model, a recording tap, the proxy.

    client -> proxy (uvicorn) -> tap (uvicorn, records) -> llama.cpp (child process, SmolLM2)

The server is started once per session (about a second) with a 2048-token window. Without the
packages the tests are skipped, except under CI (`CI` set), where they must run and so fail.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxy.app import create_app
from proxy.settings import Settings
from tests.e2e import llama
from tests.e2e.tap import Tap
from tests.fakes.server import serve

MODEL = "smollm2"
N_CTX = 2048
CONFIGURED_WINDOW = 32768  # what the proxy is told; the server really serves N_CTX


@dataclass(frozen=True)
class Llama:
    url: str  # base URL without /v1
    log: Path
    model: str = MODEL
    n_ctx: int = N_CTX


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Llama]:
    why = llama.missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"end-to-end tests must run in CI: {why}", pytrace=False)
        pytest.skip(why)
    model = llama.model_path()
    assert model is not None
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with llama.running(model, log, n_ctx=N_CTX, alias=MODEL) as url:
        yield Llama(url, log)


@pytest.fixture
def tap(llama_server: Llama) -> Iterator[Tap]:
    """A fresh recording tap in front of the server (its base URL is `tap.url`)."""
    recorder = Tap(llama_server.url)
    with serve(recorder.app()) as url:
        recorder.url = url  # type: ignore[attr-defined]
        yield recorder


ProxyFactory = Callable[..., str]


@pytest.fixture
def llama_proxy(tap: Tap) -> Iterator[ProxyFactory]:
    """llama_proxy(**settings) -> base URL of a proxy whose upstream is llama.cpp (via the tap).

    Defaults: window discovery on, and a configured window far larger than the served one, so
    only discovery or an overflow error can tell the proxy the truth.
    """
    with ExitStack() as stack:

        def start(**overrides: object) -> str:
            overrides.setdefault("upstream_url", tap.url + "/v1")  # type: ignore[attr-defined]
            overrides.setdefault("discover_window", True)
            overrides.setdefault("context_window", CONFIGURED_WINDOW)
            return stack.enter_context(serve(create_app(Settings(**overrides))))

        yield start
