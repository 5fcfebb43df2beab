"""Compaction by summary, the pure half: plan the summarizer request, read its answer, apply it.

When stage 2 drops old history, mode `compact` replaces the trim marker with one message holding
a summary of the dropped span. The work splits into a pure plan (`summary_request`: the chat body
to send), the I/O at the edge (`proxy.summarizer`), and a pure apply (`summary_message`,
`apply_summary`). Facts the summary lost (`proxy.pipeline.facts`) are appended verbatim.

The inserted text depends only on the span (cached by `span_key`), so every later turn inserts
byte-identical text and the backend's prefix cache survives. No I/O, no settings, no await.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import orjson

from proxy.pipeline.dialect import CHAT, Dialect
from proxy.pipeline.facts import extract_facts, missing_facts
from proxy.pipeline.types import Message
from proxy.pipeline.units import pinned_count

__all__ = [
    "apply_summary",
    "extract_facts",
    "marker_position",
    "missing_facts",
    "read_answer",
    "render_transcript",
    "span_key",
    "summary_body",
    "summary_message",
    "summary_request",
    "summary_room",
]

# Part of every cache key: bump it when the prompt, the inserted text's layout or the fact
# extraction changes, so a shared cache never serves text made the old way.
PROMPT_VERSION = "summary-v1"
MAX_INPUT_TOKENS = 12_000
CHARS_PER_TOKEN = 4  # the estimate that bounds the summarizer request
MIN_ITEM_CHARS = 160  # below this a transcript entry says nothing; drop entries instead
CUT_MARK_CHARS = 36  # "\n[... 12,345,678 chars cut ...]\n" and a little slack
MAX_FACTS_CHARS = 1_600  # bound on the "Facts kept verbatim" list, so the message stays bounded
FACTS_TITLE = "Facts kept verbatim:"
_HEADER = re.compile(r"^\[shrink-proxy: summary of [\d,]+ earlier messages?\]\n")
_MARKER = re.compile(
    r"^\[shrink-proxy: [\d,]+ earlier messages? \([\d,]+ tokens\) omitted to fit the context "
    r"window(?:\. Retrieve more: hash=[0-9a-f]{24})?\](?:$|\n)"  # stage 2 may have listed the
    # span's key facts below the marker line
)
_THINK = re.compile(r"<think>.*?</think>|^\s*<think>.*", re.S)

INSTRUCTIONS = """\
You are writing a handoff note. The transcript below is the earlier part of a conversation \
between a user and an AI coding agent ("-> name(args)" is a tool call, "<- ..." its result). \
It is about to be removed from the agent's context: the agent will continue the work from your \
note alone.

Write the note in plain text under these headings, leaving out any that would be empty:
Task: what the user wants, and why.
Decisions: what was decided or ruled out, and why.
Files and code: paths, functions and classes inspected or changed, and what changed.
Commands: commands run and their outcome (exit status, key output).
Errors: errors seen, their cause, and whether and how each was fixed.
Pending: what is done, what remains, open questions.

Copy file paths, commands, error messages, versions, identifiers and numbers exactly as written. \
Be terse: at most about {words} words. Do not invent anything, do not address anyone, do not \
continue the conversation."""

INCREMENTAL = """\
The note in <previous_note> already covers the conversation before this transcript. Update it: \
write one complete note in the same format that merges the previous note with the new messages, \
keeping everything from it that is still relevant."""


def _arguments(raw: Any) -> str:
    if not isinstance(raw, str):
        return ""
    try:
        return orjson.dumps(orjson.loads(raw)).decode()
    except (orjson.JSONDecodeError, TypeError):  # TypeError: deeper than orjson writes
        return raw


def _entries(span: Sequence[Message], dialect: Dialect = CHAT) -> list[tuple[str, str]]:
    """(prefix, body) per transcript entry: messages, tool calls and tool results."""
    entries: list[tuple[str, str]] = []
    for message in span:
        if not isinstance(message, dict):
            continue
        text = dialect.readable(message).strip()
        if dialect.is_result(message):
            entries.append(("<- ", text))
            continue
        if text:
            entries.append((f"{dialect.role(message) or 'unknown'}: ", text))
        for name, arguments in dialect.named_calls(message):
            entries.append((f"-> {name}", f"({_arguments(arguments)})"))
    return entries


def _cut(text: str, limit: int) -> str:
    """Head and tail of `text` in `limit` chars plus a cut mark, at line ends when one is near.

    A text that the mark would not shorten is returned whole.
    """
    if len(text) <= limit + CUT_MARK_CHARS:
        return text
    half = max(limit // 2, 1)
    head, tail = text[:half], text[len(text) - half :]
    newline = head.rfind("\n")
    if newline > half * 0.7:
        head = head[:newline]
    newline = tail.find("\n")
    if 0 <= newline < half * 0.3:
        tail = tail[newline + 1 :]
    return f"{head}\n[... {len(text) - len(head) - len(tail):,} chars cut ...]\n{tail}"


def _cost(sizes: list[int], cap: int) -> int:
    """Characters of entries of `sizes` cut to `cap` (a cut entry also carries its mark)."""
    return sum(min(s, cap + CUT_MARK_CHARS) for s in sizes)


def _level(sizes: list[int], room: int) -> int:
    """The largest per-entry cap with `_cost(sizes, cap) <= room` (water-filling)."""
    low, high = 0, max(sizes, default=0)
    while low < high:
        mid = (low + high + 1) // 2
        if _cost(sizes, mid) <= room:
            low = mid
        else:
            high = mid - 1
    return low


def full_transcript(span: Sequence[Message], dialect: Dialect = CHAT) -> str:
    """The span whole, in `render_transcript`'s lines: what a dropped span's ref keeps."""
    return "\n".join(prefix + body for prefix, body in _entries(span, dialect))


def render_transcript(span: Sequence[Message], max_chars: int, dialect: Dialect = CHAT) -> str:
    """The span as `role: text` / `-> tool(args)` / `<- result` lines within about `max_chars`.

    Entries share the room by water-filling: short ones stay whole, long ones are cut head+tail
    to a common size. When even a minimal entry each does not fit, middle entries are dropped.
    """
    entries = _entries(span, dialect)
    overhead = [len(prefix) + 1 for prefix, _ in entries]
    room = max_chars - sum(overhead)
    sizes = [len(body) for _, body in entries]
    cap = _level(sizes, room)
    dropped = 0
    if cap < MIN_ITEM_CHARS and sum(sizes) > room:
        cap = MIN_ITEM_CHARS
        per_entry = [min(s, cap + CUT_MARK_CHARS) + o for s, o in zip(sizes, overhead, strict=True)]
        # Keep entries from both ends, alternately, while they fit (the start says what the task
        # was, the end where it stands); the middle goes, with a line that says so.
        n, head, tail, used = len(entries), 0, 0, 0
        budget = max_chars - 48
        while head + tail < n:
            i = head if head <= tail else n - 1 - tail
            if used + per_entry[i] > budget:
                break
            used += per_entry[i]
            head, tail = (head + 1, tail) if i == head else (head, tail + 1)
        dropped = n - head - tail
        entries = entries[:head] + [("", "")] + entries[n - tail :]
    lines = []
    for prefix, body in entries:
        if not prefix and not body:
            lines.append(f"[... {dropped:,} transcript entries cut ...]")
        else:
            lines.append(prefix + _cut(body, cap))
    return "\n".join(lines)


def summary_request(
    span: Sequence[Message],
    *,
    model: str,
    previous: str | None,
    max_tokens: int,
    max_input_tokens: int = MAX_INPUT_TOKENS,
    dialect: Dialect = CHAT,
) -> dict[str, Any]:
    """The non-streaming chat body asking a model for a handoff note of `span`.

    With `previous` (the note for the messages before `span`), `span` holds only the messages
    after that note and the model is asked to update it: an incremental summary reads only the
    new part of the history. One user message, no system one: some chat templates reject system.
    The request stays within about `max_input_tokens` (chars / 4).
    """
    words = max(60, int(max_tokens * 0.6))
    parts = [INSTRUCTIONS.format(words=words)]
    if previous is not None:
        parts += [INCREMENTAL, f"<previous_note>\n{previous.strip()}\n</previous_note>"]
    fixed = sum(len(p) + 2 for p in parts) + 60
    room = max(max_input_tokens * CHARS_PER_TOKEN - fixed, MIN_ITEM_CHARS * 4)
    parts += [
        f"<transcript>\n{render_transcript(span, room, dialect)}\n</transcript>",
        "Write the note now.",
    ]
    return {
        "model": model,
        "messages": [{"role": "user", "content": "\n\n".join(parts)}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": False,
    }


def read_answer(payload: bytes) -> str:
    """The summary text of a chat-completion answer, without `<think>` blocks.

    Raises ValueError when the payload is not a chat completion with string content; returns ""
    when the content is empty once reasoning is stripped (the caller decides what that means).
    """
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"answer is not JSON ({exc})") from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("answer has no choices[0].message.content") from None
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ValueError(f"answer content is {type(content).__name__}, not a string")
    if "</think>" in content and "<think>" not in content:
        # Templates that open the reasoning block in the prompt send only its end.
        content = content.rsplit("</think>", 1)[1]
    return _THINK.sub("", content).strip()


def summary_message(
    summary: str,
    lost: Sequence[str],
    *,
    role: str,
    dropped: int,
    max_facts_chars: int = MAX_FACTS_CHARS,
) -> Message:
    """The message that replaces the dropped span: header, summary, then the facts it lost."""
    noun = "message" if dropped == 1 else "messages"
    text = f"[shrink-proxy: summary of {dropped:,} earlier {noun}]\n{summary.strip()}"
    bullets: list[str] = []
    used = 0
    for fact in lost:
        if used + len(fact) + 3 > max_facts_chars:
            break
        bullets.append(f"- {fact}")
        used += len(fact) + 3
    if bullets:
        text += f"\n\n{FACTS_TITLE}\n" + "\n".join(bullets)
    return {"role": role, "content": text}


def summary_room(max_tokens: int, max_facts_chars: int = MAX_FACTS_CHARS) -> int:
    """Tokens to keep free for the summary message in place of the marker: the note itself,
    the facts list at 2.5 chars a token (paths and versions are token-dense: 2.3-3.3 on the dev
    corpus), and the header. An estimate: the caller still checks the fit after
    `apply_summary` and keeps the marker when the summary is too big."""
    return max_tokens + max_facts_chars * 2 // 5 + 32


def summary_body(text: str) -> str:
    """A summary message's text without its header line: the note to update incrementally."""
    return _HEADER.sub("", text, count=1)


def span_key(span: Sequence[Message], *, model: str, settings_fingerprint: str) -> str:
    """A stable cache key for the summary of `span` by `model` under the given settings."""
    payload = orjson.dumps(
        [PROMPT_VERSION, model, settings_fingerprint, list(span)],
        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
        default=repr,
    )
    return hashlib.blake2b(payload, digest_size=20).hexdigest()


def marker_position(messages: Sequence[Message], dialect: Dialect = CHAT) -> int | None:
    """Where stage 2 put its "omitted" marker, if it did: right after the client's pinned
    messages (a system-role marker extends that pinned run, so the run's end is checked too)."""
    for i in range(min(pinned_count(messages, dialect) + 1, len(messages))):
        content = messages[i].get("content") if isinstance(messages[i], dict) else None
        if isinstance(content, str) and _MARKER.match(content):
            return i
    return None


def apply_summary(
    messages: list[Message],
    marker_index: int,
    text: str,
    role: str,
    dialect: Dialect = CHAT,
    ref: str | None = None,
) -> list[Message]:
    """`messages` with the trim marker at `marker_index` replaced by the summary `text`;
    `ref`: the span's (proxy.pipeline.refs), named after it, where the model can read it back.

    A new list; every other message is the same object. Raises ValueError when the message at
    `marker_index` is not a trim marker (the caller's plan and messages disagree).
    """
    content = messages[marker_index].get("content") if 0 <= marker_index < len(messages) else None
    if not isinstance(content, str) or not _MARKER.match(content):
        raise ValueError(f"message {marker_index} is not a shrink-proxy trim marker")
    out = list(messages)
    if ref is not None:
        text = (
            f"{text}\n[... the messages summarised are kept by shrink-proxy. "
            f"Retrieve more: hash={ref} ...]"
        )
    out[marker_index] = dialect.marker(role, text)
    return out
