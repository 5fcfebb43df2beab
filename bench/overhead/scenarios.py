"""What a run measures: profiles, targets and scenarios (body x JSON/SSE x concurrency).

The runner drives them; this module only says which targets each scenario compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.overhead.procs import Server

if TYPE_CHECKING:
    from bench.overhead.runner import Bench


@dataclass(frozen=True)
class Profile:
    rounds: int
    small_seconds: float
    large_seconds: float
    # Bodies per round at c=64 when every request is a new conversation: keeps rounds bounded.
    cold_max: int
    large_sse: bool
    # Also run the untouched-window proxy on cold bodies (the shrinking one always is).
    proxy_cold: bool


PROFILES = {
    "smoke": Profile(3, 0.7, 0.8, cold_max=64, large_sse=False, proxy_cold=False),
    "full": Profile(6, 1.5, 1.5, cold_max=128, large_sse=True, proxy_cold=True),
}


@dataclass
class Target:
    name: str
    server: Server
    cold: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Scenario:
    name: str
    body: str
    sse: bool
    concurrency: int
    targets: list[Target]
    seconds: float
    gate: bool = False
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"{self.name}  (c={self.concurrency})"


PACED = {"x-bench-gap-ms": "1"}
# The same paced stream five times longer: the CPU difference between the two, per extra chunk, is
# what one more chunk costs, free of the per-stream costs (SSE setup vs JSON) the first divides in.
PACED_LONG = {"x-bench-gap-ms": "1", "x-bench-chunks": "100"}


def scenarios_main(b: Bench, floor_name: str, extra: list[Target]) -> list[Scenario]:
    s = b.servers
    p = b.profile
    base = [Target("direct", b.upstream), Target("direct (A/A)", b.upstream)]
    small_targets = [*base, Target(floor_name, s[floor_name]), Target("proxy", s["proxy"]), *extra]
    large_targets = [
        *base,
        Target(floor_name, s[floor_name]),
        Target("proxy mode=off", s["proxy"], headers={"x-shrink-mode": "off"}),
        Target("proxy", s["proxy"]),
        *([Target("proxy cold", s["proxy"], cold=True)] if p.proxy_cold else []),
        Target("shrink", s["shrink"]),
        Target("shrink cold", s["shrink"], cold=True),
        *extra,
    ]
    out = []
    for kind in ("json", "sse"):
        for c in (1, 64):
            out.append(
                Scenario(
                    f"small-{kind}",
                    f"small-{kind}",
                    kind == "sse",
                    c,
                    small_targets,
                    p.small_seconds,
                    gate=True,
                )
            )
    if p.large_sse:
        # Unpaced, aiohttp hands the relay all 21 events at once (1-2 chunks per response); 1 ms
        # apart they arrive one per chunk, as from a model: what a streamed chunk costs.
        out.append(
            Scenario(
                "small-sse-paced",
                "small-sse",
                True,
                1,
                small_targets,
                p.small_seconds,
                headers=PACED,
            )
        )
        # Without LiteLLM: it does not pass client headers on, so the upstream never sees
        # x-bench-chunks (nor the pacing: its "paced" streams arrive unpaced).
        out.append(
            Scenario(
                "small-sse-paced-long",
                "small-sse",
                True,
                1,
                [t for t in small_targets if t not in extra],
                p.small_seconds * 2,
                headers=PACED_LONG,
            )
        )
    for kind in ("json", "sse") if p.large_sse else ("json",):
        for c in (1, 64):
            out.append(
                Scenario(
                    f"large-{kind}",
                    f"large-{kind}",
                    kind == "sse",
                    c,
                    large_targets,
                    p.large_seconds,
                )
            )
    return out


def scenarios_transport(b: Bench) -> list[Scenario]:
    s = b.servers
    targets = [
        Target("direct", b.upstream),
        Target("direct (A/A)", b.upstream),
        Target("floor-httpx", s["floor-httpx"]),
        Target("floor-aiohttp", s["floor-aiohttp"]),
    ]
    secs = b.profile.small_seconds
    out = [
        Scenario(f"small-{kind}", f"small-{kind}", kind == "sse", c, targets, secs)
        for kind in ("json", "sse")
        for c in (1, 64)
    ]
    # Events 1 ms apart arrive one by one, as from a model. Unpaced, aiohttp's reader hands over
    # everything already buffered as one chunk: cheaper, but not the same work as httpx's.
    out += [
        Scenario("small-sse-paced", "small-sse", True, c, targets, secs, headers=PACED)
        for c in (1, 64)
    ]
    return out


def scenarios_retrieval(b: Bench, floor_name: str) -> list[Scenario]:
    """The large body through three shrinking proxies: retrieval on (the default: every
    original kept in the store, at most SHRINK_STORE_MB=64), on with a 16 MB store, and off:
    the RSS the store adds, warm and with a new conversation per request (cold: every request
    brings originals the store has not seen, so the store fills to its bound)."""
    s = b.servers
    targets = [
        Target("direct", b.upstream),
        Target(floor_name, s[floor_name]),
        Target("shrink", s["shrink"]),
        Target("shrink cold", s["shrink"], cold=True),
        Target("shrink-16mb cold", s["shrink-16mb"], cold=True),
        Target("shrink-noref", s["shrink-noref"]),
        Target("shrink-noref cold", s["shrink-noref"], cold=True),
    ]
    secs = b.profile.large_seconds
    return [Scenario("large-json", "large-json", False, c, targets, secs) for c in (1, 64)]
