"""The curl examples in the docs work: each is run with bash against a real proxy.

Every ```sh block of README.md and docs/backends.md that runs curl against the proxy's
documented address has that address swapped for a live proxy (in front of the fake upstream),
is executed, and must exit 0 and print what its route answers: a chat completion, an SSE stream
for `"stream": true`, the shrink preview for /v1/shrink.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

# Where each document says the proxy is (docs/backends.md: llama.cpp's proxy moves to 8081).
DOCS = {
    "README.md": ("http://127.0.0.1:8080",),
    "docs/backends.md": ("http://127.0.0.1:8080", "http://127.0.0.1:8081"),
}
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def curl_blocks(text: str, bases: tuple[str, ...]) -> list[str]:
    return [
        block
        for block in BLOCK.findall(text)
        if re.search(r"\bcurl\b", block) and any(base in block for base in bases)
    ]


def collect() -> list[tuple[str, int, str]]:
    found = []
    for doc, bases in DOCS.items():
        for i, block in enumerate(curl_blocks((ROOT / doc).read_text(encoding="utf-8"), bases)):
            found.append((doc, i, block))
    return found


EXAMPLES = collect()


def test_extraction_finds_examples_in_every_doc():
    assert {doc for doc, _, _ in EXAMPLES} == set(DOCS)
    # Blocks that do not target the proxy are left alone.
    assert (
        curl_blocks("```sh\ncurl http://127.0.0.1:11434/api/tags\n```\n", DOCS["README.md"]) == []
    )


def check_chat(stdout: str) -> None:
    body = json.loads(stdout)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"]


def check_stream(stdout: str) -> None:
    events = [line[len("data: ") :] for line in stdout.splitlines() if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", stdout
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks and all(c["object"] == "chat.completion.chunk" for c in chunks)


def check_shrink(stdout: str) -> None:
    body = json.loads(stdout)
    assert isinstance(body["messages"], list) and body["messages"]
    assert {"tokens_before", "tokens_after", "budget"} <= set(body["report"])


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize(
    ("doc", "index", "block"), EXAMPLES, ids=[f"{d}#{i}" for d, i, _ in EXAMPLES]
)
def test_curl_example_runs(doc, index, block, proxy_url, upstream):
    script = block
    for base in DOCS[doc]:
        script = script.replace(base, proxy_url)
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    if "/v1/shrink" in block:
        check_shrink(result.stdout)
        assert upstream.requests == []  # a preview never calls the upstream
    elif re.search(r'"stream":\s*true', block):
        check_stream(result.stdout)
        assert upstream.last.json()["stream"] is True
    elif "/chat/completions" in block:
        check_chat(result.stdout)
        assert upstream.requests, "the example never reached the upstream"
    else:
        json.loads(result.stdout)
