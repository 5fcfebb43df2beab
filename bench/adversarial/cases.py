"""The cases: named request bodies of the shapes issue 20 says can stall or break the proxy.

Each generator builds one chat-completions body from a size (body bytes, messages, nesting
depth, parallel calls... its `unit` says which) plus the window and settings it is planned at.
The `smoke` sizes are small enough for CI; the `full` sizes are the issue's (up to ~54 MB, near
the default 64 MiB body limit). The per-pattern cases are built in `bench.adversarial.hostile`;
`generators()` returns both, in the order the bench runs them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.adversarial import shapes, texts
from bench.adversarial.shapes import QUESTION, SYSTEM, Message, body, dropped, tool_turn

KB = 1024
MB = 1024 * 1024
WINDOW = 32768  # the default SHRINK_CONTEXT_WINDOW
CLASS_BYTES = 380  # one class of texts.source_file
SESSIONS = (1000, 2000, 4000, 8000, 16000)  # messages: each doubling should cost ~2x


@dataclass(frozen=True)
class Case:
    """A request body and how it is planned: window, `Settings` overrides, mode."""

    body: dict[str, Any]
    window: int = WINDOW
    settings: Mapping[str, Any] = field(default_factory=dict)
    mode: str = "auto"


@dataclass(frozen=True)
class Generator:
    name: str
    build: Callable[[int], Case]
    unit: str  # what `size` counts: bytes (of the body), messages, depth, calls, lines, parts
    smoke: tuple[int, ...]
    full: tuple[int, ...]
    heavy: bool = False  # also POSTed to a running proxy in the head-of-line run

    @property
    def why(self) -> str:
        return " ".join((self.build.__doc__ or "").split("\n\n")[0].split())

    def sizes(self, profile: str) -> tuple[int, ...]:
        return self.smoke if profile == "smoke" else self.full

    def label(self, size: int) -> str:
        return f"{self.name}@{human(size) if self.unit == 'bytes' else size}"


def human(n: int) -> str:
    if n >= MB and n % (MB // 4) == 0:
        return f"{n / MB:g}M"
    return f"{n / KB:g}K" if n >= KB else str(n)


def encoded_size(value: Any) -> int:
    return len(orjson.dumps(value))


def fit(make: Callable[[int], str], size: int) -> str:
    """`make(chars)` with `chars` chosen so the text takes about `size` bytes in a JSON body
    (UTF-8 and escapes: CJK takes 3 bytes a character, a NUL 6)."""
    ratio = encoded_size(make(16 * KB)) / (16 * KB)
    return make(max(1, int(size / ratio)))


def tool_result(make: Callable[[int], str], window: int = WINDOW) -> Callable[[int], Case]:
    """A case whose one tool result is `make`'s text at the case's size."""

    def build(size: int) -> Case:
        return Case(shapes.with_tool_results([fit(make, size - 600)]), window)

    build.__doc__ = make.__doc__
    return build


# --- catastrophic and polynomial regex inputs the issue measured -------------------------------


def astar(stars: int) -> Callable[[int], Case]:
    def build(size: int) -> Case:
        """A source file with one column-0 line `a*a*...a` (no parenthesis) in its middle: the
        source outline's pattern backtracks over every split of the stars, each `*a` doubling."""
        line = "a*" * stars + "a"
        middle = max(1, size // 2 // CLASS_BYTES)
        text = texts.source_file(size, hostile=[line], every=middle)
        return Case(shapes.with_tool_results([text]))

    return build


def open_marker(size: int) -> Case:
    """Marker-like text `[... 12 lines omitted by shrink-proxy ` repeated on one line with no
    closing `...]`: the marker pattern retries every opening against the rest of the line."""
    unit = "[... 12 lines omitted by shrink-proxy "
    return Case(shapes.with_tool_results([unit * max(1, (size - 600) // len(unit))]))


def eq_summary(size: int) -> Case:
    """`=== x passed x ` repeated on one line: the anchored `=+ ... passed ... =+` rule."""
    unit = "=== x passed x "
    return Case(shapes.with_tool_results([unit * max(1, (size - 600) // len(unit))]))


def open_pytest(size: int) -> Case:
    """`1 passed 1 passed ... in ` with no closing time: the pytest summary rule's `.*\\bin`
    scans to the line's end from every `N passed`."""
    text = "1 passed " * max(1, (size - 600) // 9) + "in "
    return Case(shapes.with_tool_results([text]))


def blank_dropped(size: int) -> Case:
    """Old user and assistant messages of whitespace-only lines (a pasted terminal): the facts'
    `^\\s*\\$` prompt pattern spans the lines it may start on."""
    half = max(1, (size - 80 * KB) // 2)
    old: list[Message] = [
        {"role": "user", "content": "here:\n" + fit(lambda n: " \n" * (n // 2), half)},
        {"role": "assistant", "content": fit(lambda n: "\n\t\n" * (n // 3), half)},
    ]
    return Case(body(dropped(old, 8192)), 8192)


def dropped_huge(size: int) -> Case:
    """A huge log pasted in an old user message and a huge old assistant reply: dropped, never
    compacted, and read whole for the facts under the marker."""
    half = max(1, (size - 80 * KB) // 2)
    old: list[Message] = [
        {"role": "user", "content": "My run printed this:\n" + texts.test_log(half, 3, 97)},
        {"role": "assistant", "content": texts.prose(half, 4) + "\n$ pip install acme==1.2.3"},
    ]
    return Case(body(dropped(old, 8192)), 8192)


# --- size ----------------------------------------------------------------------------------------


def near_limit(size: int) -> Case:
    """An agent session whose tool results (logs, source files, JSON, prose; ~300 KB each) add
    up to the size: up to ~54 MB, near the default 64 MiB body limit."""
    makers = (texts.test_log, texts.source_file, texts.json_records, texts.prose)
    each = min(300 * KB, max(4 * KB, size // 8))
    messages: list[Message] = [SYSTEM]
    total = n = 0
    while total < size - each - 2 * KB:
        turn: list[Message] = [{"role": "user", "content": f"Now look at part {n}."}]
        turn += tool_turn([makers[n % 4](each, n)], prefix=f"p{n}")
        turn.append({"role": "assistant", "content": f"Part {n} read. " + texts.prose(200)})
        messages += turn
        total += encoded_size(turn)
        n += 1
    return Case(body([*messages, QUESTION]))


def messages_at(window: int) -> Callable[[int], Case]:
    def build(size: int) -> Case:
        """A long agent session of realistic four-message turns (request, call, short output,
        comment): trimming and its facts over thousands of messages, cold."""
        return Case(body(shapes.session(size)), window)

    return build


def parallel_calls(size: int) -> Case:
    """One assistant turn calling `size` tools in parallel, each result a ~4 KB test log."""
    results = [texts.test_log(4 * KB, i, 53) for i in range(size)]
    return Case(shapes.with_tool_results(results))


def short_lines(size: int) -> Case:
    """`seq 1 N` as a tool result: millions of the shortest lines."""
    return Case(shapes.with_tool_results([texts.short_lines(size)]))


def blank_lines(size: int) -> Case:
    """A tool result and an old user message of nothing but newlines."""
    blank = "\n" * (size - 1)  # `size` empty lines
    old: list[Message] = [{"role": "user", "content": blank}]
    return Case(body([*dropped(old, 8192)[:-1], *tool_turn([blank]), QUESTION]), 8192)


# --- depth ---------------------------------------------------------------------------------------


def deep_tool(kind: str) -> Callable[[int], Case]:
    def build(size: int) -> Case:
        """A JSON tool result nested `size` levels (1,000; orjson's limit, 1,024; beyond it):
        any valid JSON text must compact without an error."""
        return Case(shapes.with_tool_results([texts.deep_json(size, kind)]))

    return build


def deep_args(size: int) -> Case:
    """Tool-call arguments nested `size` deep in an old assistant message, then enough turns
    to drop it: the facts walk the arguments (RecursionError at 1,000 today: HTTP 500)."""
    old = tool_turn(["ok"], prefix="deep", args=[texts.deep_json(size, "object")])
    return Case(body(dropped([{"role": "user", "content": "Configure it."}, *old], 8192)), 8192)


# --- content -------------------------------------------------------------------------------------


def image(size: int) -> Case:
    """An old user message with a data-URL image of `size` bytes of base64, and text beside it."""
    url = "data:image/png;base64," + texts.base64_blob(size - 80 * KB)
    parts = [{"type": "text", "text": "What is wrong in this screenshot?"}]
    parts.append({"type": "image_url", "image_url": {"url": url}})  # type: ignore[dict-item]
    return Case(body(dropped([{"role": "user", "content": parts}], 8192)), 8192)


def content_parts(size: int) -> Case:
    """`size` text parts in an old user message and in a tool result's content array."""
    parts = [{"type": "text", "text": f"part {i}: " + texts.WORDS[i % 40]} for i in range(size)]
    old: list[Message] = [{"role": "user", "content": parts}]
    turn = tool_turn(["x"])
    turn[1]["content"] = parts
    return Case(body([*dropped(old, 8192)[:-1], *turn, QUESTION]), 8192)


def tool_definitions(size: int) -> Case:
    """`size` function definitions in `tools` (counted as fixed tokens beside the messages)."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": texts.prose(200, i),
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
        for i in range(size)
    ]
    return Case(shapes.with_tool_results([texts.test_log(64 * KB)], tools=tools))


def orphans(size: int) -> Case:
    """`size` tool results that answer no call (a client that dropped its assistant turns)."""
    rng = random.Random(size)
    messages: list[Message] = [SYSTEM]
    for i in range(size - 2):
        content = texts.test_log(rng.randint(200, 2000), i)
        messages.append({"role": "tool", "tool_call_id": f"ghost_{i}", "content": content})
    return Case(body([*messages, QUESTION]), 8192)


def long_ids(size: int) -> Case:
    """100 parallel calls whose ids (and tool_call_ids) are `size // 200` characters each."""
    turn = tool_turn([f"result {i}" for i in range(100)])
    width = max(8, size // 200)
    for i, c in enumerate(turn[0]["tool_calls"]):
        c["id"] = f"{i:04d}" + "x" * width
        turn[i + 1]["tool_call_id"] = c["id"]
    return Case(body([SYSTEM, {"role": "user", "content": "go"}, *turn, QUESTION]))


def carriage_returns(size: int) -> Case:
    """A progress bar redrawn with `\\r` thousands of times on one line, then a verdict."""
    frame = "\rDownloading model.bin: {:3d}%|" + "█" * 20 + "| 1.2G/4.0G [00:12<00:30]"

    def make(chars: int) -> str:
        return "".join(frame.format(i % 100) for i in range(max(1, chars // len(frame))))

    text = fit(make, size - 600)
    return Case(shapes.with_tool_results([text + "\nERROR: download interrupted"]))


def ansi_log(size: int) -> Case:
    """A colourised log: every word wrapped in ANSI escapes (`\\x1b[31m...\\x1b[0m`)."""

    def make(chars: int) -> str:
        log = texts.test_log(chars // 3)
        return log.replace("PASSED", "\x1b[32mPASSED\x1b[0m").replace(" ", "\x1b[0m \x1b[1m")

    return Case(shapes.with_tool_results([fit(make, size - 600)]))


def closed_markers(size: int) -> Case:
    """A text made of our own closed markers (output a model echoed back, or a second pass)."""
    unit = "[... 12 lines (340 tokens) omitted by shrink-proxy ...]\n"
    return Case(shapes.with_tool_results([unit * max(1, (size - 600) // len(unit))]))


def json_bignum(size: int) -> Case:
    """A JSON tool result of integers with thousands of digits (past Python's int-string
    limit, 4,300 digits) and out-of-range floats: valid JSON a parser may refuse."""
    digits = "7" * 5000
    n = max(1, (size - 600) // 5020)
    return Case(shapes.with_tool_results(["[" + ",".join([digits, "1e999"] * n) + "]"]))


def zalgo(size: int) -> Case:
    """Letters under 20 combining marks each (one visible character, 21 code points)."""
    unit = "e" + "".join(chr(0x300 + k) for k in range(20))
    return Case(shapes.with_tool_results([(unit * 5 + " ") * max(1, (size - 600) // 200)]))


def keep_last(size: int) -> Case:
    """[system, user with a `size`-token document, assistant reply, user question] at 8k: the
    last four messages are documented as never trimmed away, so the document must be cut."""
    document = "Please review this design document.\n\n" + texts.prose(size * 5, 7)
    reply = {"role": "assistant", "content": "I read it. " + texts.prose(1500, 8)}
    return Case(body([SYSTEM, {"role": "user", "content": document}, reply, QUESTION]), 8192)


def _gen(name: str, build: Callable[[int], Case], unit: str, smoke: Any, full: Any, **kw: Any):
    return Generator(name, build, unit, tuple(smoke), tuple(full), **kw)


def explicit() -> list[Generator]:
    """The named shapes, with their smoke and full sizes (see bench/README.md, adversarial)."""
    b = "bytes"
    return [
        _gen("outline-a*49", astar(24), b, [24 * KB], [24 * KB], heavy=True),
        _gen("outline-a*59", astar(29), b, [24 * KB], [24 * KB]),
        _gen("marker-open", open_marker, b, [32 * KB], [32 * KB, 256 * KB], heavy=True),
        _gen("eq-summary", eq_summary, b, [64 * KB], [224 * KB, MB], heavy=True),
        _gen("pytest-open", open_pytest, b, [64 * KB], [112 * KB, MB], heavy=True),
        _gen("dropped-blank", blank_dropped, b, [160 * KB], [360 * KB, 4 * MB]),
        _gen("dropped-huge", dropped_huge, b, [512 * KB], [360 * KB, 20 * MB], heavy=True),
        _gen("near-limit", near_limit, b, [2 * MB], [54 * MB], heavy=True),
        _gen("huge-line", tool_result(words_line), b, [MB], [20 * MB], heavy=True),
        _gen("huge-line-emoji", tool_result(emoji_line), b, [MB], [20 * MB]),
        _gen("short-lines", short_lines, "lines", [200_000], [2_000_000], heavy=True),
        _gen("blank-lines", blank_lines, "lines", [200_000], [4_000_000]),
        _gen("messages-4k", messages_at(4096), "messages", [500, 1000], SESSIONS, heavy=True),
        _gen("messages-32k", messages_at(WINDOW), "messages", [1000], [10_000, 50_000]),
        _gen("parallel-calls", parallel_calls, "calls", [128], [1000], heavy=True),
        _gen("deep-array", deep_tool("array"), "depth", [1000, 1024], [1000, 1024, 100_000]),
        _gen("deep-object", deep_tool("object"), "depth", [1000, 1024], [1000, 1024, 100_000]),
        _gen("deep-args", deep_args, "depth", [1000], [1000, 1024, 100_000], heavy=True),
        _gen("junk", tool_result(texts.junk), b, [256 * KB], [20 * MB], heavy=True),
        _gen("base64-line", tool_result(base64_line), b, [256 * KB], [20 * MB]),
        _gen("base64-wrapped", tool_result(wrapped_base64), b, [256 * KB], [20 * MB]),
        _gen("image-data-url", image, b, [MB], [20 * MB]),
        _gen("cjk", tool_result(texts.cjk), b, [256 * KB], [20 * MB]),
        _gen("emoji", tool_result(texts.emoji), b, [256 * KB], [20 * MB]),
        _gen("zalgo", zalgo, b, [256 * KB], [4 * MB]),
        _gen("json-records", tool_result(texts.json_records), b, [512 * KB], [20 * MB]),
        _gen("json-escapes", tool_result(texts.json_escapes), b, [256 * KB], [20 * MB]),
        _gen("json-bignum", json_bignum, b, [64 * KB], [4 * MB]),
        _gen("carriage-returns", carriage_returns, b, [256 * KB], [20 * MB]),
        _gen("ansi-log", ansi_log, b, [256 * KB], [20 * MB]),
        _gen("closed-markers", closed_markers, b, [256 * KB], [20 * MB]),
        _gen("content-parts", content_parts, "parts", [2000], [100_000]),
        _gen("tool-definitions", tool_definitions, "tools", [200], [5000]),
        _gen("orphan-results", orphans, "messages", [1000], [10_000]),
        _gen("long-ids", long_ids, b, [MB], [20 * MB]),
        _gen("keep-last", keep_last, "tokens", [28_000], [28_000]),
    ]


def words_line(chars: int) -> str:
    """One 20 MB line of words and no newline (a minified bundle, a one-line JSON log)."""
    return texts.words_line(chars)


def base64_line(chars: int) -> str:
    """Base64 of random bytes on one line (a data blob a tool printed whole)."""
    return texts.base64_blob(chars)


def emoji_line(chars: int) -> str:
    """One 20 MB line of words with one emoji in it: Python stores it at 4 bytes a character."""
    return texts.words_line(chars, emoji=True)


def wrapped_base64(chars: int) -> str:
    """Base64 wrapped at 76 columns, as `base64` prints an attachment."""
    return texts.base64_blob(chars, wrap=76)


def generators() -> list[Generator]:
    from bench.adversarial import hostile

    return [*explicit(), *hostile.generators()]


def cases(profile: str, only: str | None = None) -> Iterator[tuple[Generator, int, str]]:
    """(generator, size, row label) of every case of `profile`, filtered by `only`."""
    for gen in generators():
        for size in gen.sizes(profile):
            label = gen.label(size)
            if only is None or only in label:
                yield gen, size, label
