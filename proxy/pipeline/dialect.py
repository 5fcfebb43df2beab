"""How the engine reads and edits one wire format's messages: the `Dialect`.

The pipeline's algorithms (stage 1's rules, stage 2's sticky cut, stage 3's levelling, the
facts) are the same for every API; what differs is where a message keeps its role, its texts,
its tool calls and its tool results. Each wire format names those places once, in a dialect,
and the engine reaches messages only through it. `ChatDialect` is OpenAI's Chat Completions
(the reference: every default is chat); `proxy.pipeline.anthropic` is Anthropic's Messages.

Dialects are pure and stateless. Edits are copy-on-write: a method that changes a message
returns a new dict and never touches the one it was given, so every byte the plan does not
change goes upstream as the client sent it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Protocol

import orjson

from proxy.pipeline.types import Message

# A text's place inside a message, as its dialect names it (opaque to the engine).
Slot = Hashable
# What stage 1 does to one text: its replacement, or None to leave it alone.
EditText = Callable[[str], "str | None"]


class Dialect(Protocol):
    """The wire format's view of a message list, for the engine."""

    name: str

    def role(self, message: Any) -> str | None:
        """The wire role, or None for junk."""
        ...

    def is_pinned(self, message: Any) -> bool:
        """A leading instruction message (system, developer): always kept verbatim."""
        ...

    def is_user(self, message: Any) -> bool:
        """A turn the user wrote (not a tool result): a cut carries the last one across."""
        ...

    def is_result(self, message: Any) -> bool:
        """A tool result: it joins the unit of the assistant message before it."""
        ...

    def opens_unit(self, message: Any) -> bool:
        """A message that results may join (an assistant message)."""
        ...

    def group_units(self, messages: Sequence[Message], start: int) -> list[tuple[int, int]]:
        """messages[start:] as half-open spans a cut may never split."""
        ...

    def result_texts(self, message: Any) -> list[str]:
        """The tool-result texts of a message: what stage 1 compacts."""
        ...

    def edit_results(self, message: Any, edit: EditText) -> Message | None:
        """A copy of a result message with `edit` applied to each of its result texts, or None
        when it changed none."""
        ...

    def texts(self, message: Any) -> list[tuple[Slot, str]]:
        """The message's plain texts with their slots (stage 3 cuts them; facts read them).
        Never a signed or opaque block (thinking), never tool-call arguments."""
        ...

    def with_text(self, message: Message, slot: Slot, text: str) -> Message:
        """A copy of `message` with the text at `slot` replaced."""
        ...

    def joined(self, message: Message, many: int) -> Message:
        """`message` with runs of more than `many` text parts joined (stage 3 cannot cut a part
        shorter than its marker), or `message` itself."""
        ...

    def calls(self, message: Any) -> Iterator[tuple[Any, str]]:
        """(parsed arguments, raw arguments) of each tool call the message makes."""
        ...

    def named_calls(self, message: Any) -> list[tuple[str, Any]]:
        """(tool name, raw arguments) of each call the message makes (the summary's transcript)."""
        ...

    def plain_texts(self, message: Any) -> list[str]:
        """Every text the message shows the model, in order (the facts read them)."""
        ...

    def readable(self, message: Any) -> str:
        """The message's texts for a transcript, other parts named in brackets."""
        ...

    def marker(self, role: str, text: str) -> Message:
        """The message that stands in for dropped history (or its summary). `role`: the
        configured one, where the format lets a marker choose."""
        ...


PINNED_ROLES = frozenset({"system", "developer"})
RESULT_ROLES = frozenset({"tool", "function"})


def role_of(message: Any) -> str | None:
    """The role of a message, or None for junk (non-dicts, missing or non-string roles)."""
    if isinstance(message, dict):
        role = message.get("role")
        if isinstance(role, str):
            return role
    return None


def group_by_results(
    dialect: Dialect, messages: Sequence[Message], start: int
) -> list[tuple[int, int]]:
    """Split messages[start:] into half-open (begin, end) spans that a cut may never split.

    An assistant message with tool calls owns the results that follow it and answer its ids, in
    any order. A result that answers nothing in the preceding unit is an orphan already; it joins
    that unit anyway so a cut cannot separate it any further. Both rules come to the same thing:
    every result joins a unit that an assistant message starts, so the spans do not depend on ids
    at all, and junk ids cannot break them. A result after anything else (a user message,
    another orphan) stands alone: a run of a thousand orphans is no unit too big to cut.
    """
    units: list[tuple[int, int]] = []
    for i in range(max(start, 0), len(messages)):
        if units and dialect.is_result(messages[i]) and dialect.opens_unit(messages[units[-1][0]]):
            begin, _ = units[-1]
            units[-1] = (begin, i + 1)
        else:
            units.append((i, i + 1))
    return units


def content_texts(content: Any) -> list[tuple[Slot, str]]:
    """(None, content) for a string, (index, text) for each `text` part of a list."""
    if isinstance(content, str):
        return [(None, content)]
    if isinstance(content, list):
        return [
            (j, part["text"])
            for j, part in enumerate(content)
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ]
    return []


def with_content_text(content: Any, slot: Slot, text: str) -> Any:
    """`content` (a string or parts) with the text at `slot` (as `content_texts` names it)."""
    if slot is None:
        return text
    parts = list(content)
    parts[slot] = {**parts[slot], "text": text}  # type: ignore[call-overload]
    return parts


def edit_content(content: Any, edit: EditText) -> Any | None:
    """`content` with `edit` applied to its string or to each text part; None if unchanged."""
    if isinstance(content, str):
        return edit(content)
    if not isinstance(content, list):
        return None
    new_parts: list[Any] = []
    changed = False
    for part in content:
        text = part.get("text") if isinstance(part, dict) and part.get("type") == "text" else None
        done = edit(text) if isinstance(text, str) else None
        if done is None:
            new_parts.append(part)
            continue
        changed = True
        new_parts.append({**part, "text": done})
    return new_parts if changed else None


def joined_parts(content: Any, many: int) -> list[Any] | None:
    """`content` with each run of consecutive text parts joined into one, when it has more than
    `many` of them; else None. Other parts keep their places."""
    if not isinstance(content, list):
        return None
    texts = [
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ]
    if sum(texts) <= many:
        return None
    parts: list[object] = []
    run: list[str] = []
    for part, is_text in zip(content, texts, strict=True):
        if is_text:
            run.append(part["text"])
            continue
        if run:
            parts.append({"type": "text", "text": "\n".join(run)})
            run = []
        parts.append(part)
    if run:
        parts.append({"type": "text", "text": "\n".join(run)})
    return parts


def readable_content(content: Any) -> str:
    """A string content, or a list's texts with other parts named (`[image_url]`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif isinstance(part, dict):
                out.append(f"[{part.get('type', 'part')}]")
        return "\n".join(out)
    return ""


def parsed(raw: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


class ChatDialect:
    """OpenAI Chat Completions: `role`, `content` (a string or parts), `tool_calls`, and
    results as `tool` (or legacy `function`) messages."""

    name = "chat"

    def role(self, message: Any) -> str | None:
        return role_of(message)

    def is_pinned(self, message: Any) -> bool:
        return role_of(message) in PINNED_ROLES

    def is_user(self, message: Any) -> bool:
        return role_of(message) == "user"

    def is_result(self, message: Any) -> bool:
        return role_of(message) in RESULT_ROLES

    def opens_unit(self, message: Any) -> bool:
        return role_of(message) == "assistant"

    def group_units(self, messages: Sequence[Message], start: int) -> list[tuple[int, int]]:
        return group_by_results(self, messages, start)

    def result_texts(self, message: Any) -> list[str]:
        if role_of(message) not in RESULT_ROLES:
            return []
        content = message.get("content")
        if isinstance(content, list):
            return [text for _, text in content_texts(content)]
        return [content] if isinstance(content, str) else []

    def edit_results(self, message: Any, edit: EditText) -> Message | None:
        if role_of(message) not in RESULT_ROLES:
            return None
        new = edit_content(message.get("content"), edit)
        return None if new is None else {**message, "content": new}

    def texts(self, message: Any) -> list[tuple[Slot, str]]:
        return content_texts(message.get("content")) if isinstance(message, dict) else []

    def with_text(self, message: Message, slot: Slot, text: str) -> Message:
        return {**message, "content": with_content_text(message["content"], slot, text)}

    def joined(self, message: Message, many: int) -> Message:
        content = message.get("content") if isinstance(message, dict) else None
        parts = joined_parts(content, many)
        return message if parts is None else {**message, "content": parts}

    def calls(self, message: Any) -> Iterator[tuple[Any, str]]:
        calls = message.get("tool_calls")
        functions = (
            [c.get("function") for c in calls if isinstance(c, dict)]
            if isinstance(calls, list)
            else []
        )
        if isinstance(message.get("function_call"), dict):
            functions.append(message["function_call"])
        for fn in functions:
            raw = fn.get("arguments") if isinstance(fn, dict) else None
            if isinstance(raw, str):
                yield parsed(raw), raw

    def named_calls(self, message: Any) -> list[tuple[str, Any]]:
        calls = message.get("tool_calls")
        functions = (
            [c.get("function") for c in calls if isinstance(c, dict)]
            if isinstance(calls, list)
            else []
        )
        if isinstance(message.get("function_call"), dict):
            functions.append(message["function_call"])
        return [
            (fn["name"] if isinstance(fn.get("name"), str) else "tool", fn.get("arguments"))
            for fn in functions
            if isinstance(fn, dict)
        ]

    def plain_texts(self, message: Any) -> list[str]:
        content = message.get("content")
        if isinstance(content, str):
            return [content]
        if not isinstance(content, list):
            return []
        return [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]

    def readable(self, message: Any) -> str:
        return readable_content(message.get("content"))

    def marker(self, role: str, text: str) -> Message:
        return {"role": role, "content": text}


CHAT: Dialect = ChatDialect()
