"""Loading an evaluation corpus: one JSON conversation per file, as in shared/corpus/README.md.

Any directory of that format works (the dev set, the holdout set, a private one): nothing here
knows which conversations exist, so the benchmarks cannot special-case the dev contents.
Also the helpers every benchmark needs: the request body of a conversation, the texts a needle
may survive in, and settings built from defaults only.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from proxy.settings import Settings
from proxy.tokenizers import Tokenizers, resolve_cache_dir
from tests.shared_dir import DEV_CORPUS, use_offline_encodings

DEFAULT_DIR = DEV_CORPUS
# The model named in every request: a local coder model, so cl100k_base counts its tokens.
MODEL = "qwen2.5-coder"
CLASSES = ("critical", "incidental", "recent")

Message = dict[str, Any]


@dataclass(frozen=True)
class Needle:
    question: str
    answer: str
    cls: str  # "critical" | "incidental" | "recent"
    message_index: int


@dataclass(frozen=True)
class Conversation:
    id: str
    description: str
    tools: list[dict[str, Any]]
    messages: list[Message]
    needles: tuple[Needle, ...]

    def request(self, messages: list[Message] | None = None) -> dict[str, Any]:
        """The chat-completions body an agent would send (its own messages by default)."""
        body: dict[str, Any] = {"model": MODEL, "messages": self.messages}
        if messages is not None:
            body["messages"] = messages
        if self.tools:
            body["tools"] = self.tools
        return body


def load(directory: str | Path | None = None) -> list[Conversation]:
    """Every `*.json` conversation in `directory` (default: the shared dev set), by file name."""
    path = Path(directory) if directory else DEFAULT_DIR
    files = sorted(path.glob("*.json"))
    if not files:
        raise SystemExit(f"no *.json conversations in {path}")
    out = []
    for f in files:
        raw = json.loads(f.read_bytes())
        needles = tuple(
            Needle(n["question"], n["answer"], n["class"], n["message_index"])
            for n in raw.get("needles", [])
        )
        out.append(
            Conversation(
                id=raw.get("id", f.stem),
                description=raw.get("description", ""),
                tools=raw.get("tools") or [],
                messages=raw["messages"],
                needles=needles,
            )
        )
    return out


def haystack(messages: list[Message]) -> str:
    """Every message content and tool-call argument string, NUL-separated.

    A needle is kept when its answer is a substring of this; the separator cannot occur in an
    answer, so a match never straddles two texts.
    """
    parts: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        for call in m.get("tool_calls") or []:
            args = call.get("function", {}).get("arguments") if isinstance(call, dict) else None
            if isinstance(args, str):
                parts.append(args)
    return "\0".join(parts)


def pairing_ok(messages: list[Message]) -> bool:
    """Every tool result answers a call of the assistant turn before it, and every call is
    answered before the next non-tool message (what backends enforce)."""
    pending: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in pending:
                return False
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            return False
        if m.get("role") == "assistant":
            pending = {c["id"] for c in m.get("tool_calls") or []}
    return not pending


def setup_environment() -> None:
    """Point tiktoken at the offline encodings when the caller did not, and refuse `SHRINK_*`
    variables: the figures are for the default settings, whatever this shell exports."""
    use_offline_encodings()
    leaked = sorted(k for k in os.environ if k.startswith("SHRINK_"))
    if leaked:
        raise SystemExit(f"unset {', '.join(leaked)}: benchmarks measure the default settings")


def settings(**overrides: Any) -> Settings:
    """`Settings` with defaults plus `overrides`, ignoring any `.env` file."""
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


def tokenizers() -> Tokenizers:
    """A `Tokenizers` built the way the app builds it, with cl100k_base loaded up front."""
    tk = Tokenizers(cache_dir=resolve_cache_dir(os.environ))
    counter = tk.for_model(MODEL)
    if not counter.exact:
        raise SystemExit(f"tiktoken encoding not available ({counter.note})")
    return tk


def add_arguments(parser: argparse.ArgumentParser, windows: Sequence[int]) -> None:
    """The arguments every corpus benchmark takes: the corpus, raw output, windows, overrides."""
    parser.add_argument("dir", nargs="?", default=None, help="corpus dir (default: shared dev)")
    parser.add_argument("--json", metavar="FILE", help="write the raw figures here")
    parser.add_argument(
        "--windows", type=int, nargs="+", default=list(windows), help="context windows"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a setting for the main run (e.g. trim_step=0.75); repeatable",
    )


def overrides(args: argparse.Namespace) -> dict[str, str]:
    return dict(item.split("=", 1) for item in args.set)


class Run(NamedTuple):
    args: argparse.Namespace
    overrides: dict[str, str]
    convs: list[Conversation]
    tokenizers: Tokenizers


def start(parser: argparse.ArgumentParser) -> Run:
    """What every corpus benchmark begins with, once `parser` has its arguments: them parsed,
    the environment checked, the corpus loaded, the tokenizers ready."""
    args = parser.parse_args()
    setup_environment()
    return Run(args, overrides(args), load(args.dir), tokenizers())


def write_json(path: str | None, raw: Any) -> None:
    """The raw figures to `path`, when one was asked for."""
    if path:
        with open(path, "w") as f:
            json.dump(raw, f, indent=1)
        print(f"\nraw figures: {path}")
