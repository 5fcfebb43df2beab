"""Shared fixtures: a recording fake upstream and the proxy, each under real uvicorn on loopback."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.responses import FakeResponses
from tests.fakes.server import serve
from tests.fakes.upstream import FakeUpstream
from tests.shared_dir import CORPUS, ROOT, use_offline_encodings

__all__ = ["CORPUS", "ROOT"]

# Before any test module reads the environment (collection imports them after this file): plain
# `python -m pytest`, without make, counts with the offline encodings too.
use_offline_encodings()

# httpx's module-level helpers default to a 5 s timeout; on a loaded 2-core CI machine a real
# loopback request can exceed that. Tests that care about time pass their own timeout.
for _name in ("get", "post", "put", "patch", "delete", "request", "stream"):
    setattr(httpx, _name, functools.partial(getattr(httpx, _name), timeout=30.0))


# Tests that need something outside Python (a browser, Node, a real model server, Redis) skip
# where it is missing on a developer's machine; in CI (CI=true) such a skip is a failure, so a
# missing install step can never turn the suite green by running less.
REQUIRED_IN_CI = ("browser", "node", "e2e", "redis")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and not hasattr(report, "wasxfail")  # an expected failure is not a missing install
        and os.environ.get("CI")
        and any(item.get_closest_marker(m) for m in REQUIRED_IN_CI)
    ):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where it must run: {report.longrepr}"


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    with serve(fake.app()) as url:
        fake.url = url  # type: ignore[attr-defined]
        yield fake


@pytest.fixture
def upstream(fake: FakeUpstream) -> FakeUpstream:
    fake.reset()
    return fake


@pytest.fixture(scope="session")
def anthropic_fake() -> Iterator[FakeAnthropic]:
    """The fake Anthropic Messages upstream (tests/fakes/anthropic.py), served once."""
    fake = FakeAnthropic()
    with serve(fake.app()) as url:
        fake.url = url
        yield fake


@pytest.fixture
def anthropic_upstream(anthropic_fake: FakeAnthropic) -> FakeAnthropic:
    """The same, with nothing recorded and its defaults back."""
    anthropic_fake.reset()
    return anthropic_fake


@pytest.fixture(scope="session")
def responses_fake() -> Iterator[FakeResponses]:
    """The fake OpenAI Responses upstream (tests/fakes/responses.py), served once."""
    fake = FakeResponses()
    with serve(fake.app()) as url:
        fake.url = url
        yield fake


@pytest.fixture
def responses_upstream(responses_fake: FakeResponses) -> FakeResponses:
    """The same, with nothing recorded and its defaults back."""
    responses_fake.reset()
    return responses_fake


ProxyFactory = Callable[..., str]


@pytest.fixture
def start_proxy(upstream: FakeUpstream) -> Iterator[ProxyFactory]:
    """start_proxy(**settings) -> base URL of a proxy in front of the fake upstream."""
    with ExitStack() as stack:

        def start(**overrides) -> str:
            overrides.setdefault("upstream_url", upstream.url + "/v1")  # type: ignore[attr-defined]
            # Discovery probes (GETs) would show up in tests that assert what reached the
            # upstream; tests/test_windows_http.py runs it against backend-like fakes.
            overrides.setdefault("discover_window", False)
            settings = Settings(**overrides)
            return stack.enter_context(serve(create_app(settings)))

        yield start


@pytest.fixture
def proxy_url(start_proxy: ProxyFactory) -> str:
    return start_proxy()
