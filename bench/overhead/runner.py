"""Orchestration: start the servers, drive interleaved rounds through the load generator, report.

Each scenario (body size x JSON/SSE x concurrency) runs its targets in alternating order per round
(A B C, C B A, ...) so slow drift on the shared machine lands on every target alike, and
`direct (A/A)` hits the upstream a second time to show how much of a difference is noise.
The CPU read from /proc brackets only the measured requests of one round of one target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.overhead import bodies, procs, report
from bench.overhead.procs import ROOT, Server, python_module
from bench.overhead.scenarios import (
    PROFILES,
    Scenario,
    Target,
    scenarios_main,
    scenarios_retrieval,
    scenarios_transport,
)
from tests.shared_dir import DEV_CORPUS

LITELLM_VENV = Path("/tmp/litellm-venv")
# Smoke gate (CI): the proxy may cost at most this many times the floor's CPU per request on
# small pass-through bodies.
MAX_CPU_RATIO = 2.5


class LoadGen:
    """The load generator process, driven over its stdin/stdout."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            python_module("bench.overhead.loadgen"),
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("load generator exited")
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        try:
            self.call_quit()
        finally:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def call_quit(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write('{"cmd": "quit"}\n')
            self.proc.stdin.flush()
        except OSError:
            pass


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.profile = PROFILES[args.profile]
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
        self.empty_env = self.tmp / "empty.env"
        self.empty_env.write_text("")
        self.servers: dict[str, Server] = {}
        self.upstream = self._server("upstream", "bench.overhead.upstream")
        self.body_files: dict[str, Path] = {}
        self.rss: dict[str, dict[str, float]] = {}
        self.out: dict[str, Any] = {"profile": args.profile, "scenarios": [], "failures": []}

    # --- servers ----------------------------------------------------------------------------

    def _server(
        self, name: str, module: str, *args: str, env: dict[str, str] | None = None
    ) -> Server:
        port = procs.free_port()
        argv = python_module(module, "--port", str(port), *args)
        server = Server(name, argv, port, env=env or {})
        self.servers[name] = server
        return server

    def upstream_url(self) -> str:
        return f"http://127.0.0.1:{self.upstream.port}"

    def floor(self, transport: str, name: str = "floor") -> Server:
        return self._server(
            name,
            "bench.overhead.floor",
            "--upstream",
            self.upstream_url(),
            "--transport",
            transport,
        )

    def proxy(self, name: str, window: int, settings: dict[str, str] | None = None) -> Server:
        """`python -m proxy serve` pointed at the fake upstream, with offline tiktoken files
        (and `settings`, SHRINK_* variables, for an experiment)."""
        cache = bodies.default_tiktoken_dir()
        env = {"TIKTOKEN_CACHE_DIR": cache} if cache else {}
        env.update(settings or {})
        port = procs.free_port()
        argv = python_module(
            "proxy",
            "serve",
            "--port",
            str(port),
            "--upstream",
            self.upstream_url() + "/v1",
            "--log-level",
            "warning",
            "--context-window",
            str(window),
            # An empty env file: a stray .env in the repo root must not change what is measured.
            "--env-file",
            str(self.empty_env),
        )
        server = Server(name, argv, port, env=env)
        self.servers[name] = server
        return server

    def litellm(self) -> Server | None:
        binary = LITELLM_VENV / "bin" / "litellm"
        if not binary.exists():
            print(f"note: --litellm ignored: {binary} does not exist", file=sys.stderr)
            return None
        config = self.tmp / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            f"  - model_name: {bodies.MODEL}\n"
            "    litellm_params:\n"
            "      model: openai/bench\n"
            f"      api_base: {self.upstream_url()}/v1\n"
            "      api_key: sk-upstream\n"
            "litellm_settings:\n"
            "  telemetry: false\n"
            "general_settings:\n"
            "  master_key: sk-bench\n"
        )
        port = procs.free_port()
        argv = [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
        env = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_MASTER_KEY": "sk-bench",
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
        }
        server = Server("litellm", argv, port, env=env)
        self.servers["litellm"] = server
        return server

    def start_all(self) -> None:
        for s in self.servers.values():
            s.start(self.tmp)
        for s in self.servers.values():
            s.wait_ready(120 if s.name == "litellm" else 60)
        time.sleep(0.5)  # let startup work settle before reading idle RSS
        self.rss["idle"] = {name: procs.rss_mb(s.pid) for name, s in self.servers.items()}

    def stop_all(self) -> None:
        for s in self.servers.values():
            s.stop()

    # --- bodies -----------------------------------------------------------------------------

    def build_bodies(self) -> None:
        from proxy.tokenizers import Tokenizers

        cache = bodies.default_tiktoken_dir()
        counter = Tokenizers(cache_dir=cache).for_model(bodies.MODEL)
        built = bodies.build(
            Path(self.args.corpus), self.args.conversation, self.args.large_tokens, counter
        )
        info: dict[str, Any] = {"model": bodies.MODEL, "encoding": counter.name}
        for name, body in built.items():
            path = self.tmp / f"{name}.json"
            path.write_bytes(body.template)
            self.body_files[name] = path
            info[name] = {"bytes": len(body.template), "tokens": body.tokens}
            info[name]["messages"] = body.messages
        if counter.encoding is not None:
            info["tiktoken_encode_large_ms"] = bodies.encode_ms(
                counter.encoding, built["large-json"].warm()
            )
        self.out["bodies"] = info

    # --- running ----------------------------------------------------------------------------

    def run_scenario(self, gen: LoadGen, sc: Scenario) -> dict[str, Any]:
        rounds = {t.name: report.Rounds(t.name, t.server.name) for t in sc.targets}
        upstream_pid = self.upstream.pid
        if sc.concurrency > 1:
            for s in self.servers.values():
                procs.reset_peak_rss(s.pid)
        for r in range(self.profile.rounds):
            order = sc.targets if r % 2 == 0 else list(reversed(sc.targets))
            for t in order:
                ready = gen.call(
                    {
                        "cmd": "prepare",
                        "port": t.server.port,
                        "path": t.server.path,
                        "body": str(self.body_files[sc.body]),
                        "sse": sc.sse,
                        "cold": t.cold,
                        "concurrency": sc.concurrency,
                        "warmup": 1,
                        "headers": {**sc.headers, **t.headers},
                    }
                )
                if ready.get("warmup_errors"):
                    rounds[t.name].errors += len(ready["warmup_errors"])
                    rounds[t.name].error_samples.extend(ready["warmup_errors"])
                cpu0 = procs.cpu_seconds(t.server.pid)
                up0 = procs.cpu_seconds(upstream_pid)
                result = gen.call(
                    {
                        "cmd": "go",
                        "duration": sc.seconds,
                        "max_requests": self.profile.cold_max
                        if t.cold and sc.concurrency > 1
                        else None,
                    }
                )
                cpu = procs.cpu_seconds(t.server.pid) - cpu0
                up = procs.cpu_seconds(upstream_pid) - up0
                if t.server is self.upstream:
                    up = 0.0
                rounds[t.name].add(result, cpu, up)
        direct = rounds.get("direct")
        rows = [rd.summary(direct) for rd in rounds.values()]
        if sc.concurrency > 1:
            after = self.rss.setdefault("after_c64", {})
            peak = self.rss.setdefault("peak_c64", {})
            now = self.rss.setdefault(f"after {sc.name} c={sc.concurrency}", {})
            during = self.rss.setdefault(f"peak {sc.name} c={sc.concurrency}", {})
            for name, s in self.servers.items():
                now[name] = procs.rss_mb(s.pid)
                during[name] = procs.peak_rss_mb(s.pid)
                after[name] = max(after.get(name, 0.0), now[name])
                peak[name] = max(peak.get(name, 0.0), during[name])
        return {
            "name": sc.name,
            "body": sc.body,
            "sse": sc.sse,
            "concurrency": sc.concurrency,
            "seconds_per_round": sc.seconds,
            "rounds": self.profile.rounds,
            "gate": sc.gate,
            "targets": rows,
        }

    def print_scenario(self, res: dict[str, Any], floor_name: str) -> None:
        title = (
            f"== {res['name']}  c={res['concurrency']}  ({res['rounds']} interleaved rounds x "
            f"{res['seconds_per_round']:g}s per target)"
        )
        lines = report.scenario_table(title, res["targets"], res["sse"])
        res["ratios"] = {}
        for name in [r["target"] for r in res["targets"]]:
            if name in ("direct", "direct (A/A)", floor_name) or name.startswith("floor"):
                continue
            v = report.versus(res["targets"], name, floor_name)
            if v is not None:
                res["ratios"][f"{name}/{floor_name}"] = v
                lines.append(report.versus_line(f"{name}/{floor_name}", v))
        for r in res["targets"]:
            h = r.get("headers") or {}
            if "x-shrink-tokens-before" in h:
                lines.append(
                    f"  {r['target']}: tokens {h['x-shrink-tokens-before']} -> "
                    f"{h.get('x-shrink-tokens-after')} ({h.get('x-shrink-actions')})"
                )
            for e in r["error_samples"][:3]:
                lines.append(f"  ERROR {r['target']}: {e}")
        print("\n".join(lines) + "\n", flush=True)

    def gate(self, res: dict[str, Any], floor_name: str) -> None:
        for r in res["targets"]:
            if r["errors"]:
                self.out["failures"].append(
                    f"{res['name']} c={res['concurrency']}: {r['target']} had {r['errors']} errors"
                )
        if not res["gate"]:
            return
        v = res["ratios"].get(f"proxy/{floor_name}")
        if v and v["cpu_per_req"] is not None and v["cpu_per_req"] > MAX_CPU_RATIO:
            self.out["failures"].append(
                f"{res['name']} c={res['concurrency']}: proxy CPU/request is "
                f"x{v['cpu_per_req']:.2f} the floor's (limit x{MAX_CPU_RATIO})"
            )


def unbuffered_check(b: Bench, gen: LoadGen, names: list[str]) -> list[dict[str, Any]]:
    """Time to the first SSE event when the upstream spaces 5 events 200 ms apart: a relay that
    buffers shows ~800 ms instead of ~1 ms."""
    rows = []
    for name in names:
        server = b.upstream if name == "direct" else b.servers[name]
        gen.call(
            {
                "cmd": "prepare",
                "port": server.port,
                "path": server.path,
                "body": str(b.body_files["small-sse"]),
                "sse": True,
                "concurrency": 1,
                "warmup": 0,
                "headers": {"x-bench-gap-ms": "200", "x-bench-chunks": "5"},
            }
        )
        res = gen.call({"cmd": "go", "duration": 10.0, "max_requests": 3})
        rows.append(
            {
                "target": name,
                "requests": res["n"],
                "errors": res["errors"],
                "first_event_ms": [round(x * 1000, 1) for x in res["ttfb"]],
                "total_ms": [round(x * 1000, 1) for x in res["lat"]],
                "chunks_per_resp": res["chunks"] / res["n"] if res["n"] else None,
            }
        )
    return rows


def echo_headers(server: Server) -> str:
    """The request head the upstream receives through `server` for a bare GET."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"GET /v1/bench/headers HTTP/1.1\r\nhost: client\r\nx-client: 1\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536) or b"\r\n\r\n"
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(v)
                for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                if k.strip().lower() == b"content-length"
            ),
            0,
        )
        while len(body) < length:
            more = s.recv(65536)
            if not more:
                break
            body += more
    return body.decode(errors="replace")


def source_state() -> dict[str, str]:
    """Which proxy was measured: the tree may hold uncommitted work."""

    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return r.stdout.strip()

    import hashlib

    digest = hashlib.sha1()
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": git("status", "--porcelain", "proxy"),
        "proxy_tree_sha1": digest.hexdigest(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead",
        description="Proxy overhead vs a floor pass-through and the upstream itself, on loopback.",
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="smoke")
    parser.add_argument("--json", metavar="FILE", help="write the raw figures here")
    parser.add_argument(
        "--corpus",
        default=str(DEV_CORPUS),
        help="folder of corpus conversations (default ../shared/corpus/dev)",
    )
    parser.add_argument("--conversation", default="dev-13", help="corpus file name prefix")
    # 44,000 cuts dev-13 at 43,269 tokens: over a 16k window even after stage 1, so the shrinking
    # proxy runs every stage (tools, trim, facts). At 38,500 the body sat 33 tokens under the
    # budget after stage 1: the figures skipped stage 2 and flipped with any change to stage 1.
    parser.add_argument(
        "--large-tokens", type=int, default=44000, help="large body: most tokens (cut at a turn)"
    )
    parser.add_argument(
        "--shrink-window", type=int, default=16384, help="context window of the shrinking proxy"
    )
    parser.add_argument(
        "--floor",
        choices=["httpx", "aiohttp"],
        default="aiohttp",
        help="floor's transport (default: the proxy's own default, aiohttp)",
    )
    parser.add_argument("--litellm", action="store_true", help=f"add LiteLLM ({LITELLM_VENV})")
    parser.add_argument(
        "--experiment",
        choices=["transport", "retrieval"],
        help="transport: floor with httpx's transport vs httpx-aiohttp's, instead of the main "
        "run; retrieval: the large body through a shrinking proxy with retrieval on and off "
        "(the store's RSS)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="PREFIX",
        help="run only scenarios whose name starts with this (repeatable), e.g. small-json",
    )
    args = parser.parse_args(argv)
    leaked = sorted(k for k in os.environ if k.startswith("SHRINK_"))
    if leaked:
        # As the other benchmarks: the figures are for the default settings.
        raise SystemExit(f"unset {', '.join(leaked)}: benchmarks measure the default settings")
    started = time.monotonic()
    b = Bench(args)
    gen: LoadGen | None = None
    try:
        b.build_bodies()
        floor_name = f"floor-{args.floor}" if args.experiment != "transport" else "floor-httpx"
        extra: list[Target] = []
        if args.experiment == "transport":
            b.floor("httpx", "floor-httpx")
            b.floor("aiohttp", "floor-aiohttp")
            b.proxy("proxy", 10_000_000)
        elif args.experiment == "retrieval":
            b.floor(args.floor, floor_name)
            b.proxy("shrink", args.shrink_window)
            b.proxy("shrink-noref", args.shrink_window, {"SHRINK_RETRIEVE": "false"})
            b.proxy("shrink-16mb", args.shrink_window, {"SHRINK_STORE_MB": "16"})
        else:
            b.floor(args.floor, floor_name)
            b.proxy("proxy", 10_000_000)
            b.proxy("shrink", args.shrink_window)
            if args.litellm:
                server = b.litellm()
                if server is not None:
                    extra.append(Target("litellm", server))
        b.start_all()
        gen = LoadGen()
        report.print_header(b)
        if args.experiment == "transport":
            scenarios = scenarios_transport(b)
        elif args.experiment == "retrieval":
            scenarios = scenarios_retrieval(b, floor_name)
        else:
            scenarios = scenarios_main(b, floor_name, extra)
        if args.scenario:
            scenarios = [x for x in scenarios if x.name.startswith(tuple(args.scenario))]
        b.out["source"] = source_state()
        for sc in scenarios:
            res = b.run_scenario(gen, sc)
            b.print_scenario(res, floor_name)
            b.gate(res, floor_name)
            b.out["scenarios"].append(res)
        if args.experiment == "transport":
            rows = unbuffered_check(b, gen, ["direct", "floor-httpx", "floor-aiohttp", "proxy"])
            b.out["unbuffered"] = rows
            print("== SSE through a slow upstream (5 events, 200 ms apart): first event / total ms")
            for r in rows:
                print(
                    f"  {r['target']:<16} first {r['first_event_ms']}  total {r['total_ms']}  "
                    f"chunks/resp {report.fmt(r['chunks_per_resp'], 1)}  errors {r['errors']}"
                )
            print("\n== request head the upstream sees for `GET /v1/bench/headers` (x-client: 1)")
            b.out["upstream_sees"] = {}
            for name in ("floor-httpx", "floor-aiohttp", "proxy"):
                head = echo_headers(b.servers[name])
                b.out["upstream_sees"][name] = head
                print(f"  {name}: " + " | ".join(head.split("\r\n")))
            print()
        if args.experiment is None:
            report.print_summary(b, floor_name)
        if args.experiment == "retrieval":
            b.out["retrieval_store"] = report.print_store(
                b, ["shrink", "shrink-16mb", "shrink-noref"]
            )
        report.print_rss(b)
        b.out["rss_mb"] = b.rss
    except Exception:
        for s in b.servers.values():
            if s.proc is not None and s.proc.poll() is not None:
                print(f"{s.name} exited early:\n{s.tail()}", file=sys.stderr)
        raise
    finally:
        if gen is not None:
            gen.close()
        b.stop_all()
    b.out["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(b.out, indent=1))
    print(f"total {b.out['seconds']}s")
    if b.out["failures"]:
        print("FAIL:\n  " + "\n  ".join(b.out["failures"]))
        print(f"server logs kept in {b.tmp}")
        return 1
    shutil.rmtree(b.tmp, ignore_errors=True)
    print("OK")
    return 0
