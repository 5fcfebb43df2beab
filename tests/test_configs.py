"""Every config/*.env is a working setup for its backend.

It loads into valid Settings, names the backend's real base URL, holds no secret, stays
parseable by docker's and compose's env-file readers, and a request through a proxy built from
it reaches the upstream at the path that backend serves (the upstream host swapped for the fake).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import openai
import orjson
import pytest

from proxy.settings import Settings, load_settings
from tests.conftest import ROOT

CONFIG = ROOT / "config"
ENV_FILES = sorted(CONFIG.glob("*.env"))
NAMES = [p.name for p in ENV_FILES]

# The base URL each backend serves its OpenAI API under (placeholders where a name is yours).
UPSTREAMS = {
    "ollama.env": "http://127.0.0.1:11434/v1",
    "omlx.env": "http://127.0.0.1:8000/v1",
    "llamacpp.env": "http://127.0.0.1:8080/v1",
    "lmstudio.env": "http://127.0.0.1:1234/v1",
    "vllm.env": "http://127.0.0.1:8000/v1",
    "openai.env": "https://api.openai.com/v1",
    "openrouter.env": "https://openrouter.ai/api/v1",
    "azure.env": "https://RESOURCE.openai.azure.com/openai/v1",
    "azure-classic.env": "https://RESOURCE.openai.azure.com/openai",
}
CLOUD = {"openai.env", "openrouter.env", "azure.env", "azure-classic.env"}

DEPLOYMENT = "/openai/deployments/x/chat/completions"
API_VERSION = "api-version=2024-10-21"
# (path the client sends, path the upstream must receive), per file. Written out, not derived
# from the proxy's own mapping, so a wrong mapping or a wrong base URL fails here.
ROUTES: dict[str, list[tuple[str, str]]] = {
    "ollama.env": [("/v1/chat/completions", "/v1/chat/completions")],
    "omlx.env": [("/v1/chat/completions", "/v1/chat/completions")],
    "llamacpp.env": [("/v1/chat/completions", "/v1/chat/completions")],
    "lmstudio.env": [("/v1/chat/completions", "/v1/chat/completions")],
    "vllm.env": [("/v1/chat/completions", "/v1/chat/completions")],
    "openai.env": [("/v1/chat/completions", "/v1/chat/completions")],
    "openrouter.env": [("/v1/chat/completions", "/api/v1/chat/completions")],
    "azure.env": [
        ("/v1/chat/completions", "/openai/v1/chat/completions"),
        ("/openai/v1/chat/completions", "/openai/v1/chat/completions"),
        (DEPLOYMENT, DEPLOYMENT),
    ],
    "azure-classic.env": [(DEPLOYMENT, DEPLOYMENT)],
}

KNOWN_KEYS = {
    f.validation_alias if isinstance(f.validation_alias, str) else f"SHRINK_{name.upper()}"
    for name, f in Settings.model_fields.items()
}
# Keys come from the environment, never from these files; the host stays the default so the
# same file is safe on a laptop (127.0.0.1) and in the image (which sets 0.0.0.0 itself).
FORBIDDEN_KEYS = {"SHRINK_UPSTREAM_API_KEY", "SHRINK_PROXY_API_KEY", "SHRINK_HOST"}
SECRET_PATTERNS = [
    re.compile(r"sk-(?:proj-|or-v1-|ant-)?[A-Za-z0-9_-]{20,}"),  # OpenAI / OpenRouter style
    re.compile(r"\b[0-9a-f]{32}\b"),  # Azure OpenAI keys are 32 hex digits
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
]


@pytest.fixture(autouse=True)
def no_shrink_env(monkeypatch):
    """Variables win over the file: clear any SHRINK_* so the file alone is what is tested."""
    for key in list(os.environ):
        if key.startswith("SHRINK_"):
            monkeypatch.delenv(key)


def assignments(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not KEY=value: {line!r}"
            out.append((key, value))
    return out


def test_every_backend_has_a_config():
    assert sorted(UPSTREAMS) == NAMES
    assert sorted(ROUTES) == NAMES


# Backends whose served window the proxy discovers (proxy/discovery.py).
DISCOVERED = {"ollama.env", "llamacpp.env", "lmstudio.env", "vllm.env"}


@pytest.mark.parametrize("path", ENV_FILES, ids=NAMES)
def test_config_loads_into_valid_settings(path):
    settings = load_settings(str(path))
    assert settings.upstream_url == UPSTREAMS[path.name]
    scheme = urlsplit(settings.upstream_url).scheme
    assert scheme == ("https" if path.name in CLOUD else "http")
    if path.name != "azure-classic.env":
        assert settings.upstream_url.endswith("/v1")
    assert settings.upstream_api_key is None and settings.proxy_api_key is None
    assert settings.host == "127.0.0.1"
    assert 4096 <= settings.context_window <= 2_000_000
    if path.name in DISCOVERED:
        # A configured window always wins over the one the server reports: these files only
        # show the per-model form, commented out, so discovery stays in charge.
        assert not settings.model_windows
        assert "# SHRINK_MODEL_WINDOWS=" in path.read_text()
    else:
        assert settings.model_windows, "show the per-model form in every file"
        assert all(4096 <= w <= 2_000_000 for w in settings.model_windows.values())


@pytest.mark.parametrize("path", ENV_FILES, ids=NAMES)
def test_config_format_suits_every_env_file_reader(path):
    """Plain KEY=value: python-dotenv, `docker run --env-file` and compose read it alike."""
    pairs = assignments(path)
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"{path.name}: duplicate keys"
    for key, value in pairs:
        assert key in KNOWN_KEYS, f"{path.name}: unknown setting {key}"
        assert key not in FORBIDDEN_KEYS, f"{path.name}: {key} must not be set in a config file"
        assert value and value == value.strip(), f"{path.name}: {key} empty or padded"
        assert value[0] not in "'\"", f"{path.name}: {key} is quoted (docker keeps the quotes)"
        assert " #" not in value, f"{path.name}: {key} has an inline comment"
        if key == "SHRINK_MODEL_WINDOWS":
            assert isinstance(orjson.loads(value), dict)


@pytest.mark.skipif(shutil.which("docker") is None, reason="docker CLI not installed")
def test_docker_cli_accepts_every_env_file(tmp_path):
    """The docker CLI parses --env-file before it contacts the daemon: point it at none."""
    bad = tmp_path / "bad.env"
    bad.write_text("BAD KEY=1\n")
    env = {
        "DOCKER_HOST": f"unix://{tmp_path / 'no-daemon.sock'}",
        "DOCKER_CONFIG": str(tmp_path),
        "HOME": str(tmp_path),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }

    def create(path: Path) -> str:
        argv = ["docker", "create", "--env-file", str(path), "scratch"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60).stderr

    assert "invalid env file" in create(bad)  # the check below can fail
    for path in ENV_FILES:
        stderr = create(path)
        assert "invalid env file" not in stderr, stderr
        assert "Cannot connect to the Docker daemon" in stderr, stderr


@pytest.mark.parametrize("path", ENV_FILES, ids=NAMES)
def test_config_holds_no_secret(path):
    text = path.read_text(encoding="utf-8")
    for pattern in SECRET_PATTERNS:
        assert not pattern.search(text), f"{path.name}: looks like a real key: {pattern.pattern}"


@pytest.mark.parametrize("path", ENV_FILES, ids=NAMES)
def test_proxy_port_does_not_clash_with_a_local_upstream(path):
    settings = load_settings(str(path))
    upstream = urlsplit(settings.upstream_url)
    if upstream.hostname in ("127.0.0.1", "localhost"):
        assert settings.port != upstream.port


@pytest.mark.parametrize("path", ENV_FILES, ids=NAMES)
def test_docs_show_each_config(path):
    docs = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    assert f"config/{path.name}" in docs


def proxy_for(path: Path, start_proxy, upstream, **overrides) -> str:
    """A proxy with the file's settings, its upstream host swapped for the fake's (same path)."""
    settings = load_settings(str(path))
    fields = settings.model_dump(exclude={"tiktoken_cache_dir", "upstream_url"})
    fields.update(overrides)
    base_path = urlsplit(settings.upstream_url).path
    return start_proxy(upstream_url=upstream.url + base_path, **fields)


@pytest.mark.parametrize(
    ("path", "sent", "expected"),
    [(p, sent, exp) for p in ENV_FILES for sent, exp in ROUTES[p.name]],
    ids=[f"{p.name}:{sent}" for p in ENV_FILES for sent, _ in ROUTES[p.name]],
)
def test_request_reaches_the_backend_path(path, sent, expected, start_proxy, upstream):
    key = "sk-upstream-from-env" if path.name in CLOUD else None
    url = proxy_for(path, start_proxy, upstream, upstream_api_key=key)
    azure_style = sent.startswith("/openai/deployments/")
    query = "?" + API_VERSION if azure_style else ""
    auth = {"api-key": "dummy"} if azure_style else {"authorization": "Bearer dummy"}
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    r = httpx.post(
        url + sent + query,
        content=body,
        headers={"content-type": "application/json", **auth},
        timeout=20,
    )
    assert r.status_code == 200, r.text
    rec = upstream.last
    assert (rec.method, rec.path) == ("POST", expected)
    assert rec.query.decode() == query.lstrip("?")
    assert rec.body == body  # small request: forwarded byte for byte
    if key is None:
        assert rec.header("authorization") == "Bearer dummy"
    else:
        assert rec.header("authorization") == f"Bearer {key}"
        assert rec.header("api-key") == (key if azure_style else None)


@pytest.mark.parametrize("name", ["azure.env", "azure-classic.env"])
def test_azure_sdk_client_through_each_azure_config(name, start_proxy, upstream):
    """The real AzureOpenAI client, as the files tell users to configure it."""
    url = proxy_for(CONFIG / name, start_proxy, upstream, upstream_api_key="azure-real-key")
    client = openai.AzureOpenAI(
        azure_endpoint=url, api_key="dummy", api_version="2024-10-21", max_retries=0
    )
    with client:
        out = client.chat.completions.create(
            model="gpt-4o-deployment", messages=[{"role": "user", "content": "hi"}]
        )
    assert out.choices[0].message.content == "Hello from fake upstream."
    rec = upstream.last
    assert rec.path == "/openai/deployments/gpt-4o-deployment/chat/completions"
    assert rec.query.decode() == API_VERSION
    assert rec.header("api-key") == "azure-real-key"


def test_openrouter_extras_pass_through(start_proxy, upstream):
    """`transforms: []` and the attribution headers reach OpenRouter as the client sent them."""
    url = proxy_for(CONFIG / "openrouter.env", start_proxy, upstream)
    with openai.OpenAI(
        base_url=url + "/v1",
        api_key="dummy",
        max_retries=0,
        default_headers={"HTTP-Referer": "https://example.com/app", "X-Title": "my-app"},
    ) as client:
        client.chat.completions.with_raw_response.create(
            model="openai/gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"transforms": []},
        )
    rec = upstream.last
    assert rec.path == "/api/v1/chat/completions"
    assert rec.json()["transforms"] == []
    assert rec.header("http-referer") == "https://example.com/app"
    assert rec.header("x-title") == "my-app"
