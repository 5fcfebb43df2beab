"""Anthropic's Messages API as the engine sees it (a `Dialect`, see proxy.pipeline.dialect).

A message is `{"role": "user" | "assistant", "content": str | [block]}`; `system` and `tools`
sit outside the messages, are never changed, and are counted by the edge as fixed tokens.

- An assistant message's `tool_use` blocks are answered by `tool_result` blocks in the next
  user message (several per message, with text blocks beside them): that user message is a
  *result*, the pair one unit. A user message without a `tool_result` is a turn the user wrote.
- `thinking` / `redacted_thinking` blocks are signed: never edited, never counted as text to
  cut. A model that thinks through a tool loop needs the loop's first thinking block back, so
  when the current tool-use cycle (everything after the latest user turn) holds one, the cycle
  is one unit: a cut never lands inside it.
- Stage 1 compacts a `tool_result`'s content (a string or text blocks); `is_error`,
  `cache_control` and every other field of a block stay as they came.
- Images and documents count a fixed cost (a base64 source is not text the model reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import orjson

from proxy.pipeline.dialect import (
    EditText,
    Slot,
    edit_content,
    group_by_results,
    readable_content,
    role_of,
)
from proxy.pipeline.types import Message

# Anthropic bills an image by its pixels (about w*h/750, at most ~1,600 for 1.15 MP): the
# largest is what a budget must assume. A PDF page costs ~1,500-3,000: a document is many.
IMAGE_TOKENS = 1600
DOCUMENT_TOKENS = 3000
# The signature is checked, not read; a redacted block's data is encrypted thinking whose
# length says little of its cost.
REDACTED_TOKENS = 256
TOKENS_PER_MESSAGE = 3
TOKENS_PER_BLOCK = 3
SIGNED = frozenset({"thinking", "redacted_thinking"})
MEDIA = {"image": IMAGE_TOKENS, "document": DOCUMENT_TOKENS}


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _type(block: Any) -> str | None:
    kind = block.get("type") if isinstance(block, dict) else None
    return kind if isinstance(kind, str) else None


def _dump(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def has_signed(message: Any) -> bool:
    """Whether an assistant message holds a thinking block (signed: kept byte for byte)."""
    return any(_type(b) in SIGNED for b in _blocks(message))


class AnthropicDialect:
    name = "anthropic"

    def role(self, message: Any) -> str | None:
        return role_of(message)

    def is_pinned(self, message: Any) -> bool:
        return False  # `system` is outside the messages

    def is_result(self, message: Any) -> bool:
        return role_of(message) == "user" and any(
            _type(b) == "tool_result" for b in _blocks(message)
        )

    def is_user(self, message: Any) -> bool:
        return role_of(message) == "user" and not self.is_result(message)

    def opens_unit(self, message: Any) -> bool:
        return role_of(message) == "assistant"

    def group_units(self, messages: Sequence[Message], start: int) -> list[tuple[int, int]]:
        units = group_by_results(self, messages, start)
        latest = next(
            (i for i in range(len(messages) - 1, -1, -1) if self.is_user(messages[i])), -1
        )
        cycle = [b for b, (begin, _) in enumerate(units) if begin > latest]
        if len(cycle) > 1 and any(
            has_signed(messages[i]) for i in range(latest + 1, len(messages))
        ):
            units[cycle[0] :] = [(units[cycle[0]][0], units[-1][1])]
        return units

    # --- texts ---------------------------------------------------------------------------

    def result_texts(self, message: Any) -> list[str]:
        if not self.is_result(message):
            return []
        out: list[str] = []
        for block in _blocks(message):
            if _type(block) == "tool_result":
                out += [text for _, text in _inner_texts(block.get("content"))]
        return out

    def edit_results(self, message: Any, edit: EditText) -> Message | None:
        if not self.is_result(message):
            return None
        blocks = _blocks(message)
        new_blocks: list[Any] | None = None
        for j, block in enumerate(blocks):
            if _type(block) != "tool_result":
                continue
            new = edit_content(block.get("content"), edit)
            if new is None:
                continue
            if new_blocks is None:
                new_blocks = list(blocks)
            new_blocks[j] = {**block, "content": new}
        return None if new_blocks is None else {**message, "content": new_blocks}

    def texts(self, message: Any) -> list[tuple[Slot, str]]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return [(None, content)]
        out: list[tuple[Slot, str]] = []
        for j, block in enumerate(_blocks(message)):
            kind = _type(block)
            if kind == "text" and isinstance(block.get("text"), str):
                out.append(((j, None), block["text"]))
            elif kind == "tool_result":
                out += [((j, k), text) for k, text in _inner_texts(block.get("content"))]
        return out

    def with_text(self, message: Message, slot: Slot, text: str) -> Message:
        if slot is None:
            return {**message, "content": text}
        j, k = cast(tuple[int, int | None], slot)
        blocks = list(message["content"])
        block = blocks[j]
        if k is None:
            blocks[j] = {**block, "text": text}
        elif k == -1:
            blocks[j] = {**block, "content": text}
        else:
            inner = list(block["content"])
            inner[k] = {**inner[k], "text": text}
            blocks[j] = {**block, "content": inner}
        return {**message, "content": blocks}

    def joined(self, message: Message, many: int) -> Message:
        return message

    def calls(self, message: Any) -> Iterator[tuple[Any, str]]:
        for block in _blocks(message):
            if _type(block) == "tool_use":
                args = block.get("input")
                yield args, _dump(args)

    def named_calls(self, message: Any) -> list[tuple[str, Any]]:
        return [
            (b["name"] if isinstance(b.get("name"), str) else "tool", _dump(b.get("input")))
            for b in _blocks(message)
            if _type(b) == "tool_use"
        ]

    def plain_texts(self, message: Any) -> list[str]:
        """Texts first, tool results' texts last: the facts read the last text as the output
        whose verdict counts (one result per message in chat)."""
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return [content]
        texts: list[str] = []
        results: list[str] = []
        for block in _blocks(message):
            kind = _type(block)
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_result":
                results += [text for _, text in _inner_texts(block.get("content"))]
        return texts + results

    def readable(self, message: Any) -> str:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return content
        out = []
        for block in _blocks(message):
            kind = _type(block)
            if kind == "text" and isinstance(block.get("text"), str):
                out.append(block["text"])
            elif kind == "tool_result":
                out.append(readable_content(block.get("content")))
            elif kind != "tool_use":  # calls are listed as such
                out.append(f"[{kind or 'block'}]")
        return "\n".join(out)

    def marker(self, role: str, text: str) -> Message:
        return {"role": "user", "content": text}  # the Messages API has no system turn

    # --- counting -------------------------------------------------------------------------

    def count_message(
        self, message: Any, length: Callable[[str], int], count_text: Callable[[str], int]
    ) -> int:
        """Tokens of one message: texts, tool inputs and results as text, signed and media
        blocks at a fixed cost, unknown blocks by their JSON. `length` encodes a short text,
        `count_text` a text worth caching (a long result, shared with stage 1)."""
        if not isinstance(message, dict):
            return TOKENS_PER_MESSAGE + length(_dump(message))
        n = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if key == "content":
                n += _count_content(value, length, count_text)
            elif value is not None:
                n += length(value if isinstance(value, str) else _dump(value))
        return n


def _inner_texts(content: Any) -> list[tuple[int, str]]:
    """A tool_result's content texts: (-1, content) for a string, (k, text) per text block."""
    if isinstance(content, str):
        return [(-1, content)]
    if isinstance(content, list):
        return [
            (k, b["text"])
            for k, b in enumerate(content)
            if _type(b) == "text" and isinstance(b.get("text"), str)
        ]
    return []


def _count_content(
    content: Any, length: Callable[[str], int], count_text: Callable[[str], int]
) -> int:
    if isinstance(content, str):
        return count_text(content)
    if not isinstance(content, list):
        return length(_dump(content))
    n = 0
    for block in content:
        kind = _type(block)
        if kind is None:
            n += length(block if isinstance(block, str) else _dump(block))
            continue
        n += TOKENS_PER_BLOCK
        if kind == "text" and isinstance(block.get("text"), str):
            n += count_text(block["text"])
        elif kind == "tool_result":
            n += _count_content(block.get("content"), length, count_text)
            n += length(_dump(block.get("tool_use_id")))
        elif kind == "tool_use":
            n += length(_dump(block.get("name"))) + length(_dump(block.get("input")))
        elif kind == "thinking":
            thinking = block.get("thinking")
            n += count_text(thinking) if isinstance(thinking, str) else 0
        elif kind == "redacted_thinking":
            n += REDACTED_TOKENS
        elif kind in MEDIA:
            source = block.get("source")
            data = source.get("data") if isinstance(source, dict) else None
            text = isinstance(source, dict) and source.get("type") == "text"
            n += count_text(data) if text and isinstance(data, str) else MEDIA[kind]
        else:
            n += length(_dump(block))
    return n


ANTHROPIC = AnthropicDialect()
