"""Texts a tool or a user can put in a message: realistic ones at any size, and hostile ones.

Each builder is a pure function of its arguments (a seeded `random.Random` where it varies), so
a case is the same bytes on every run and on every machine, and its size is what it was asked
for (within a line). Realistic texts are there to be the context hostile lines hide in: the
pipeline reads a source file, a test log, JSON and prose differently, and a pattern only sees
the text its reading sends it to.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable, Sequence

WORDS = (
    "the request was retried after the worker restarted and the cache missed again so the "
    "handler read every row from disk while the queue kept growing until the limit was hit "
    "then the scheduler moved the job to another node where the same config loaded cleanly"
).split()
MODULES = ("store", "queue", "parser", "router", "cache", "client", "worker", "schema")
CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自之着去过家"
# Single code points, ZWJ sequences, skin tones, flags and keycaps: 1 to 7 code points each.
EMOJI = (
    "😀",
    "🚀",
    "✅",
    "❌",
    "🔥",
    "👍🏽",
    "👩‍💻",
    "👨‍👩‍👧‍👦",
    "🏳️‍🌈",
    "🇯🇵",
    "1️⃣",
    "🧑🏿‍🔬",
)


def fill(make: Callable[[int], str], chars: int, sep: str = "\n") -> str:
    """`make(0)`, `make(1)`, ... joined by `sep` until `chars` characters (the last one cut)."""
    parts: list[str] = []
    total = i = 0
    while total < chars:
        part = make(i)
        parts.append(part)
        total += len(part) + len(sep)
        i += 1
    return sep.join(parts)[:chars]


def prose(chars: int, seed: int = 0) -> str:
    """Sentences of plain English words, one paragraph per ~600 characters."""
    rng = random.Random(seed)

    def sentence(i: int) -> str:
        n = rng.randint(8, 20)
        words = [WORDS[rng.randrange(len(WORDS))] for _ in range(n)]
        end = ".\n\n" if i % 8 == 7 else "."
        return " ".join(words).capitalize() + end

    return fill(sentence, chars, sep=" ")


def source_file(chars: int, seed: int = 0, hostile: Sequence[str] = (), every: int = 1) -> str:
    """A Python module of small classes: what `cat` of a file returns. With `hostile`, its
    lines (at column 0, in turn) are placed after every `every`-th class, so at most one line
    in fifteen is not code and the text is still read as source (its outline is scanned)."""
    rng = random.Random(seed)

    def block(i: int) -> str:
        name = MODULES[i % len(MODULES)].capitalize() + str(i)
        size = rng.randint(2, 64)
        lines = [
            f"class {name}:",
            f'    """Keeps the records of shard {i}."""',
            "",
            f"    def __init__(self, path, size={size}):",
            "        self.path = path",
            "        self.size = size",
            "        self.items = []",
            "",
            "    def add(self, item):",
            "        if len(self.items) >= self.size:",
            "            self.items.pop(0)",
            "        self.items.append(item)",
            "        return len(self.items)",
            "",
        ]
        if hostile and i % every == every - 1:
            lines += [hostile[(i // every) % len(hostile)], ""]
        return "\n".join(lines)

    return fill(block, chars)


def test_log(chars: int, seed: int = 0, failing: int = 997) -> str:
    """A verbose pytest run: PASSED lines, a FAILED one every `failing` tests, a summary."""
    rng = random.Random(seed)

    def line(i: int) -> str:
        mod = MODULES[i % len(MODULES)]
        verdict = "FAILED" if i % failing == failing - 1 else "PASSED"
        return f"tests/test_{mod}.py::test_case_{i}[{rng.randrange(10**6)}] {verdict} [ {i % 100}%]"

    body = fill(line, max(0, chars - 60))
    return body + "\n===== 1 failed, 4211 passed in 12.34s ====="


def short_lines(lines: int) -> str:
    """`seq 1 N`: the shortest lines a real command prints, as many as asked."""
    return "\n".join(map(str, range(1, lines + 1)))


def words_line(chars: int, seed: int = 0, emoji: bool = False) -> str:
    """One line of words and no newline (a minified bundle, a one-line JSON log). With `emoji`,
    one emoji in the middle: Python then stores the whole string at 4 bytes a character."""
    rng = random.Random(seed)
    out = fill(lambda i: WORDS[rng.randrange(len(WORDS))], chars, sep=" ")
    if emoji:
        mid = len(out) // 2
        out = out[:mid] + "😀" + out[mid + 1 :]
    return out


def junk(chars: int, seed: int = 0) -> str:
    """Random bytes as a tool decodes them (`errors="replace"`), NULs and C0/C1 controls kept."""
    rng = random.Random(seed)
    raw = rng.randbytes(chars)
    text = raw.decode("utf-8", errors="replace")
    return text[:chars]


def base64_blob(chars: int, seed: int = 0, wrap: int = 0) -> str:
    """Base64 of random bytes: one line, or wrapped at `wrap` columns as `base64` prints it."""
    rng = random.Random(seed)
    blob = base64.b64encode(rng.randbytes(chars * 3 // 4 + 3)).decode()[:chars]
    if not wrap:
        return blob
    return "\n".join(blob[i : i + wrap] for i in range(0, len(blob), wrap))


def cjk(chars: int, seed: int = 0) -> str:
    """Chinese-looking text in lines of 40-120 characters (3 UTF-8 bytes, ~1 token each)."""
    rng = random.Random(seed)
    return fill(lambda i: "".join(rng.choices(CJK, k=rng.randint(40, 120))) + "。", chars)


def emoji(chars: int, seed: int = 0) -> str:
    """Emoji between short words: multi-code-point sequences, 4 bytes a code point."""
    rng = random.Random(seed)

    def piece(i: int) -> str:
        return EMOJI[rng.randrange(len(EMOJI))] + (" ok" if i % 5 else "\n")

    return fill(piece, chars, sep="")


def deep_json(depth: int, kind: str = "array") -> str:
    """JSON nested `depth` levels: `[[[...1...]]]` or `{"a": {"a": ... 1 ...}}`."""
    if kind == "array":
        return "[" * depth + "1" + "]" * depth
    return '{"a": ' * depth + "1" + "}" * depth


def json_records(chars: int, seed: int = 0) -> str:
    """A pretty-printed JSON listing of records (what `kubectl -o json` or an API returns)."""
    rng = random.Random(seed)

    def record(i: int) -> str:
        item = {
            "id": i,
            "name": f"{MODULES[i % len(MODULES)]}-{rng.randrange(10**5)}",
            "status": "Failed" if i % 500 == 499 else "Running",
            "labels": {"tier": "backend", "zone": f"z{i % 3}"},
        }
        return json.dumps(item, indent=2)

    body = fill(record, max(2, chars - 4), sep=",\n")
    # The cut may fall inside a record: close the listing after the last whole one.
    body = body[: body.rfind("}\n}") + 3] if "}\n}" in body else body
    return "[\n" + body + "\n]"


def json_escapes(chars: int) -> str:
    """A JSON document whose strings are all escapes (`\\u00e9`, `\\n`, `\\"`, `\\\\`, `\\t`):
    valid JSON that a compaction must round-trip, not choke on."""
    unit = r"\u00e9\n\"\\\t\u4e2d\ud83d\ude00 "
    n = max(1, (chars - 40) // (len(unit) * 64 + 4))
    values = ",".join('"' + unit * 64 + '"' for _ in range(n))
    return '{"escaped": [' + values + "]}"
