"""The container files: Dockerfile, .dockerignore, the tiktoken bake step and docker-compose.yml.

No Docker daemon is needed: the files are read as data, the healthcheck command and the bake
script are run for real on this machine, and `docker-compose config` / `hadolint` validate the
files where they are installed (skipped otherwise).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from proxy.settings import load_settings
from tests.conftest import ROOT
from tests.shared_dir import TIKTOKEN_CACHE

DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
BAKE = ROOT / "docker" / "bake_tiktoken.py"
SHARED_CACHE = TIKTOKEN_CACHE
ENCODING_FILES = {
    "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",  # cl100k_base
    "fb374d419588a4632f3f557e76b4b70aebbca790",  # o200k_base
}
# The port each model server listens on inside its container.
BACKEND_PORTS = {"ollama": 11434, "llamacpp": 8080, "vllm": 8000}


def instructions(path: Path) -> list[list[tuple[str, str]]]:
    """Dockerfile instructions as (KEYWORD, arguments), one list per stage (before: ARGs)."""
    stages: list[list[tuple[str, str]]] = [[]]
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, args = full.partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append((keyword.upper(), args.strip()))
    return stages


def args_of(stage: list[tuple[str, str]], keyword: str) -> list[str]:
    return [a for k, a in stage if k == keyword]


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in args_of(stage, "ENV"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            env[key] = value
    return env


@pytest.fixture(scope="module")
def stages():
    found = instructions(DOCKERFILE)
    assert len(found) >= 3, "expected ARGs, a build stage and a runtime stage"
    return found


def test_dockerfile_base_is_slim_python(stages):
    args = dict(a.split("=", 1) for a in args_of(stages[0], "ARG") if "=" in a)
    assert args.get("PYTHON_VERSION") in ("3.11", "3.12")
    for stage in stages[1:]:
        base = args_of(stage, "FROM")[0].split()[0]
        assert base == "python:${PYTHON_VERSION}-slim"


def test_dockerfile_runs_as_a_numeric_non_root_user(stages):
    runtime = stages[-1]
    users = args_of(runtime, "USER")
    assert users, "the runtime stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert any(f"--uid {uid}" in a for a in args_of(runtime, "RUN")), "the user must exist"


def test_dockerfile_installs_the_package_without_test_extras(stages):
    build = " ".join(args_of(stages[1], "RUN"))
    # The redis extra only: the compose profile `replicas` runs the same image on Redis.
    assert re.search(r"""pip install (\.|"\.\[redis\]")(\s|$)""", build), build
    assert "[test]" not in build


def test_dockerfile_bakes_tiktoken_where_the_runtime_looks(stages):
    build, runtime = stages[1], stages[-1]
    cache = env_of(runtime)["TIKTOKEN_CACHE_DIR"]
    assert any(f"bake_tiktoken.py {cache}" in a for a in args_of(build, "RUN"))
    assert f"--from=build {cache} {cache}" in args_of(runtime, "COPY")
    assert any(a.startswith("docker/tiktoken-cache/") for a in args_of(build, "COPY"))


def test_dockerfile_serves_from_env_settings(stages):
    runtime = stages[-1]
    env = env_of(runtime)
    assert env["SHRINK_HOST"] == "0.0.0.0"
    assert args_of(runtime, "EXPOSE") == [env.get("SHRINK_PORT", "8080")] == ["8080"]
    assert json.loads(args_of(runtime, "CMD")[-1]) == ["shrink-proxy", "serve"]


def healthcheck_argv(stages) -> list[str]:
    [check] = args_of(stages[-1], "HEALTHCHECK")
    exec_form = check[check.index("CMD ") + 4 :]
    argv = json.loads(exec_form)
    assert argv[0] == "python", "slim has no curl: the check must use Python"
    return [sys.executable, *argv[1:]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthcheck_command_passes_against_a_running_proxy(stages, proxy_url):
    argv = healthcheck_argv(stages)
    assert "/healthz" in argv[-1]
    port = str(urlsplit(proxy_url).port)
    ok = subprocess.run(argv, env={"SHRINK_PORT": port}, capture_output=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    down = subprocess.run(
        argv, env={"SHRINK_PORT": str(free_port())}, capture_output=True, timeout=30
    )
    assert down.returncode != 0


def test_dockerignore_lets_through_exactly_what_copy_needs(stages):
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def included(path: str) -> bool:
        keep = True
        for rule in rules:
            negate = rule.startswith("!")
            pattern = rule.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
                keep = negate
        return keep

    sources = [
        src
        for stage in stages
        for args in args_of(stage, "COPY")
        if not args.startswith("--from")
        for src in args.split()[:-1]
    ]
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), src
        assert included(src.rstrip("/")), f".dockerignore drops {src}"
    for secret_or_bulk in (".env", "tests", ".venv", ".git", "config"):
        assert not included(secret_or_bulk), f".dockerignore lets {secret_or_bulk} in"


def test_package_data_reaches_the_image():
    """The image runs `pip install .` (not -e): files under proxy/ that are not Python reach it
    only when pyproject declares them as package data."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = setuptools.get("package-data", {})
    patterns = [*data.get("proxy", []), *data.get("*", [])]
    package = ROOT / "proxy"
    for path in package.rglob("*"):
        if path.is_dir() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, p) for p in patterns), (
            f"proxy/{rel} is left out of `pip install .`: add it to "
            "[tool.setuptools.package-data] in pyproject.toml"
        )


def run_bake(cache_dir: Path) -> subprocess.CompletedProcess[str]:
    # requests honours HTTPS_PROXY: a closed local port makes any download fail at once.
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"HTTPS_PROXY": dead, "https_proxy": dead, "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, str(BAKE), str(cache_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(not SHARED_CACHE.is_dir(), reason="no shared tiktoken cache to bake from")
def test_bake_uses_files_from_the_build_context_offline(tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(SHARED_CACHE, cache)
    result = run_bake(cache)
    assert result.returncode == 0, result.stderr
    assert ENCODING_FILES <= {p.name for p in cache.iterdir()}


def test_bake_fails_the_build_when_encodings_cannot_be_had(tmp_path):
    result = run_bake(tmp_path / "empty")
    assert result.returncode == 1
    assert "cl100k_base" in result.stderr and "o200k_base" in result.stderr
    assert "docker/tiktoken-cache/" in result.stderr


@pytest.mark.skipif(not SHARED_CACHE.is_dir(), reason="no shared tiktoken cache to bake from")
def test_bake_rejects_a_damaged_file(tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(SHARED_CACHE, cache)
    damaged = cache / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
    damaged.chmod(0o644)
    damaged.write_bytes(b"not an encoding\n")
    result = run_bake(cache)
    assert result.returncode == 1
    assert "bake_tiktoken: cl100k_base:" in result.stderr
    assert "bake_tiktoken: o200k_base:" not in result.stderr


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def proxies(compose: dict) -> dict[str, dict]:
    return {n: s for n, s in compose["services"].items() if s.get("build") == "."}


def test_compose_default_proxy_sits_next_to_ollama(compose):
    proxy = compose["services"]["proxy"]
    assert "profiles" not in proxy and "profiles" not in compose["services"]["ollama"]
    assert proxy["ports"] == ["127.0.0.1:8080:8080"]
    assert proxy["environment"]["SHRINK_UPSTREAM_URL"] == "http://ollama:11434/v1"
    assert "ollama" in proxy["depends_on"]
    assert any(v.endswith(":/root/.ollama") for v in compose["services"]["ollama"]["volumes"])


def test_compose_publishes_on_loopback_only_on_distinct_ports(compose):
    host_ports = []
    for name, service in compose["services"].items():
        for mapping in service.get("ports", []):
            assert str(mapping).startswith("127.0.0.1:"), f"{name} publishes {mapping}"
            host_ports.append(str(mapping).split(":")[1])
    assert len(host_ports) == len(set(host_ports)), "two services publish the same host port"


def test_compose_each_proxy_points_at_its_own_backend(compose):
    services = compose["services"]
    seen = set()
    for name, proxy in proxies(compose).items():
        env = proxy["environment"]
        target = urlsplit(env["SHRINK_UPSTREAM_URL"])
        backend = services[target.hostname]
        assert target.port == BACKEND_PORTS[target.hostname]
        assert target.path == "/v1"
        # The replicas share the default backend; every other pair has its own.
        shared = proxy.get("profiles") == ["replicas"] and target.hostname == "ollama"
        assert shared or backend.get("profiles") == proxy.get("profiles"), name
        assert target.hostname in proxy["depends_on"]
        assert (ROOT / proxy["env_file"]).is_file()
        # The file's own port/host (llamacpp.env moves the port) must not leak into the image.
        assert env["SHRINK_HOST"] == "0.0.0.0"
        assert proxy["ports"][0].rsplit(":", 1)[1] == str(env["SHRINK_PORT"])
        seen.add(target.hostname)
    assert seen == set(BACKEND_PORTS)


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_compose_servers_run_with_the_windows_the_configs_assume(compose):
    services = compose["services"]

    def window(env_file: str) -> int:
        return load_settings(str(ROOT / env_file)).context_window

    ollama = int(services["ollama"]["environment"]["OLLAMA_CONTEXT_LENGTH"])
    assert ollama == window(services["proxy"]["env_file"])
    assert int(option(services["llamacpp"]["command"], "-c")) == window(
        services["proxy-llamacpp"]["env_file"]
    )
    assert int(option(services["vllm"]["command"], "--max-model-len")) == window(
        services["proxy-vllm"]["env_file"]
    )


def test_compose_replicas_share_one_redis(compose):
    services = compose["services"]
    replicas = {n: p for n, p in proxies(compose).items() if p.get("profiles") == ["replicas"]}
    assert len(replicas) == 2
    for name, proxy in replicas.items():
        store = urlsplit(proxy["environment"]["SHRINK_STORE_URL"])
        assert store.scheme == "redis" and store.hostname == "redis", name
        assert "redis" in proxy["depends_on"], name
    redis = services["redis"]
    assert redis["profiles"] == ["replicas"] and "ports" not in redis
    assert option(redis["command"], "--maxmemory-policy") == "allkeys-lru"
    # One proxy alone keeps its state in process: nothing to run beside it.
    assert "SHRINK_STORE_URL" not in services["proxy"]["environment"]


def test_compose_profile_images(compose):
    services = compose["services"]
    assert services["llamacpp"]["image"] == "ghcr.io/ggml-org/llama.cpp:server"
    assert services["llamacpp"]["profiles"] == ["llamacpp"]
    assert services["vllm"]["image"].startswith("vllm/vllm-openai")
    assert services["vllm"]["profiles"] == ["vllm"]
    gpu = services["vllm"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_accepts_the_file_and_reads_env_files_as_we_do():
    from dotenv import dotenv_values

    argv = ["docker-compose", "-f", str(COMPOSE), "--profile", "llamacpp", "--profile", "vllm"]
    result = subprocess.run([*argv, "config"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    for name, proxy in proxies(yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))).items():
        from_file = dotenv_values(ROOT / proxy["env_file"])
        env = resolved[name]["environment"]
        for key, value in from_file.items():
            expected = str(proxy["environment"].get(key, value))
            assert env[key] == expected, (name, key)


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed")
def test_hadolint_passes():
    result = subprocess.run(
        ["hadolint", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
