"""OpenAI's Responses API as the engine sees it (a `Dialect`, see proxy.pipeline.dialect).

The engine's "messages" are the items of `input`; `instructions` and `tools` sit outside, are
never changed, and are counted by the edge as fixed tokens.

- A `message` item (`type` may be absent) has a `role` and a `content` (a string or parts:
  `input_text`, `output_text`, `input_image`, `input_file`). A user message is a turn the user
  wrote; leading system / developer messages are pinned.
- A call (`function_call`, `custom_tool_call`, `local_shell_call`, `apply_patch_call`,
  `computer_call`, ...) is answered by the item of the same `call_id` whose type ends in
  `_output`: the result. Everything the model produced in one response (its reasoning, its
  calls, its message) and the results answering those calls are one unit, and a result always
  joins the unit of its call, wherever it sits: a cut never separates them.
- `reasoning` items (their `encrypted_content` is the model's own state, sealed) and
  `compaction` items are never edited, never cut as text. A model that reasons through a tool
  loop needs the loop's reasoning back, so when the current cycle (everything after the latest
  user message) holds one, the cycle is one unit (as Anthropic's thinking blocks, see
  proxy.pipeline.anthropic).
- Stage 1 compacts a result's `output` (a string, or its text parts).
- MCP, web search, computer and unknown item types are carried whole and counted by their JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import orjson

from proxy.pipeline.anthropic import DOCUMENT_TOKENS, IMAGE_TOKENS
from proxy.pipeline.dialect import PINNED_ROLES, EditText, Slot, parsed
from proxy.pipeline.types import Message

TOKENS_PER_ITEM = 3
# A reasoning (or compaction) item's `encrypted_content` is read only by the model that wrote
# it: OpenAI drops earlier turns' reasoning from the context, and a local backend cannot decrypt
# it at all, so its length says little of what it costs. Codex sends one per model response: at
# Anthropic's 256 for a redacted block, a long session would pay thousands of tokens it does not
# use. The visible texts (summary, content) are counted as text; a backend that counts more says
# so in its usage (calibration) or its overflow error (the retry).
ENCRYPTED_TOKENS = 32
TOKENS_PER_PART = 3
TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
MEDIA = {"input_image": IMAGE_TOKENS, "input_file": DOCUMENT_TOKENS}
# Never edited: the model's sealed state, and a server-side compaction of earlier turns.
SEALED = frozenset({"reasoning", "compaction"})
CALL_ID = "call_id"


def _type(item: Any) -> str | None:
    """An item's type; a dict with a role and no type is an (easy) message."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    return "message" if isinstance(item.get("role"), str) and kind is None else None


def _dump(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def _call_id(item: Any) -> str | None:
    value = item.get(CALL_ID) if isinstance(item, dict) else None
    return value if isinstance(value, str) else None


def is_output(item: Any) -> bool:
    """A tool call's result: `function_call_output`, `custom_tool_call_output`, ..."""
    kind = _type(item)
    return kind is not None and kind.endswith("_output")


def has_sealed(item: Any) -> bool:
    return _type(item) in SEALED


def _parts_texts(value: Any) -> list[tuple[int | None, str]]:
    """(None, value) for a string, (k, text) for each text part of a list."""
    if isinstance(value, str):
        return [(None, value)]
    if isinstance(value, list):
        return [
            (k, p["text"])
            for k, p in enumerate(value)
            if isinstance(p, dict)
            and p.get("type") in TEXT_PARTS
            and isinstance(p.get("text"), str)
        ]
    return []


def _with_part_text(value: Any, k: int | None, text: str) -> Any:
    if k is None:
        return text
    parts = list(value)
    parts[k] = {**parts[k], "text": text}
    return parts


def _edit_parts(value: Any, edit: EditText) -> Any | None:
    new = value
    changed = False
    for k, text in _parts_texts(value):
        done = edit(text)
        if done is not None:
            new = _with_part_text(new, k, done)
            changed = True
    return new if changed else None


def _readable_parts(value: Any) -> str:
    if isinstance(value, str):
        return value
    out = []
    for p in value if isinstance(value, list) else []:
        if isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str):
            out.append(p["text"])
        elif isinstance(p, dict):
            out.append(f"[{p.get('type', 'part')}]")
    return "\n".join(out)


class ResponsesDialect:
    name = "responses"

    def role(self, message: Any) -> str | None:
        kind = _type(message)
        if kind is None:
            return None
        if kind == "message":
            role = message.get("role")
            return role if isinstance(role, str) else None
        return "tool" if is_output(message) else "assistant"

    def is_pinned(self, message: Any) -> bool:
        return _type(message) == "message" and message.get("role") in PINNED_ROLES

    def is_user(self, message: Any) -> bool:
        return _type(message) == "message" and message.get("role") == "user"

    def is_result(self, message: Any) -> bool:
        return is_output(message)

    def opens_unit(self, message: Any) -> bool:
        """What the model produced (its messages, calls, reasoning, unknown items)."""
        kind = _type(message)
        if kind is None or is_output(message):
            return False
        return kind != "message" or message.get("role") == "assistant"

    def group_units(self, messages: Sequence[Message], start: int) -> list[tuple[int, int]]:
        """One unit per model response: its consecutive items, then the results after them;
        a result whose call sits in an earlier unit merges every unit from there; the current
        cycle is one unit when it holds a reasoning or compaction item."""
        units: list[tuple[int, int]] = []
        calls: dict[str, int] = {}  # call_id -> the index of its unit
        for i in range(max(start, 0), len(messages)):
            item = messages[i]
            produced = self.opens_unit(item)
            if units and (
                (produced and self.opens_unit(messages[i - 1]) and i - 1 >= start)
                or (is_output(item) and self.opens_unit(messages[units[-1][0]]))
            ):
                units[-1] = (units[-1][0], i + 1)
            else:
                units.append((i, i + 1))
            cid = _call_id(item)
            if cid is None:
                continue
            if not is_output(item):
                calls.setdefault(cid, len(units) - 1)
            elif (u := calls.get(cid)) is not None and u < len(units) - 1:
                units[u:] = [(units[u][0], units[-1][1])]
                calls = {c: min(v, u) for c, v in calls.items()}
        latest = next(
            (i for i in range(len(messages) - 1, -1, -1) if self.is_user(messages[i])), -1
        )
        cycle = [b for b, (begin, _) in enumerate(units) if begin > latest]
        if len(cycle) > 1 and any(
            has_sealed(messages[i]) for i in range(max(latest + 1, start), len(messages))
        ):
            units[cycle[0] :] = [(units[cycle[0]][0], units[-1][1])]
        return units

    # --- texts ---------------------------------------------------------------------------

    def result_texts(self, message: Any) -> list[str]:
        if not is_output(message):
            return []
        return [text for _, text in _parts_texts(message.get("output"))]

    def edit_results(self, message: Any, edit: EditText) -> Message | None:
        if not is_output(message):
            return None
        new = _edit_parts(message.get("output"), edit)
        return None if new is None else {**message, "output": new}

    def texts(self, message: Any) -> list[tuple[Slot, str]]:
        """A message's content texts and a result's output texts; never reasoning, never a
        call's arguments."""
        kind = _type(message)
        if kind == "message":
            return [(("content", k), t) for k, t in _parts_texts(message.get("content"))]
        if is_output(message):
            return [(("output", k), t) for k, t in _parts_texts(message.get("output"))]
        return []

    def with_text(self, message: Message, slot: Slot, text: str) -> Message:
        key, k = cast(tuple[str, int | None], slot)
        return {**message, key: _with_part_text(message[key], k, text)}

    def joined(self, message: Message, many: int) -> Message:
        return message

    def calls(self, message: Any) -> Iterator[tuple[Any, str]]:
        for _, raw in self._raw_calls(message):
            yield parsed(raw), raw

    def _raw_calls(self, message: Any) -> list[tuple[str, str]]:
        kind = _type(message)
        if kind is None or kind == "message" or is_output(message) or kind in SEALED:
            return []
        if _call_id(message) is None:
            return []
        name = message.get("name")
        name = name if isinstance(name, str) else kind
        for key in ("arguments", "input"):
            if isinstance(message.get(key), str):
                return [(name, message[key])]
        rest = {k: v for k, v in message.items() if k not in ("type", "id", CALL_ID, "status")}
        return [(name, _dump(rest))]

    def named_calls(self, message: Any) -> list[tuple[str, Any]]:
        return list(self._raw_calls(message))

    def plain_texts(self, message: Any) -> list[str]:
        return [text for _, text in self.texts(message)]

    def readable(self, message: Any) -> str:
        kind = _type(message)
        if kind == "message":
            return _readable_parts(message.get("content"))
        if is_output(message):
            return _readable_parts(message.get("output"))
        if kind is None or self._raw_calls(message):
            return ""  # calls are listed as such
        return f"[{kind}]"

    def marker(self, role: str, text: str) -> Message:
        return {"type": "message", "role": role, "content": text}

    # --- counting -------------------------------------------------------------------------

    def count_message(
        self, message: Any, length: Callable[[str], int], count_text: Callable[[str], int]
    ) -> int:
        """Tokens of one item: texts and outputs as text, media and sealed reasoning at a fixed
        cost, every other field by its JSON."""
        if not isinstance(message, dict):
            return TOKENS_PER_ITEM + length(_dump(message))
        n = TOKENS_PER_ITEM
        for key, value in message.items():
            if value is None:
                continue
            if key in ("content", "output", "summary"):
                n += _count_parts(value, length, count_text)
            elif key == "encrypted_content":
                n += ENCRYPTED_TOKENS
            else:
                n += length(value if isinstance(value, str) else _dump(value))
        return n


def _count_parts(value: Any, length: Callable[[str], int], count_text: Callable[[str], int]) -> int:
    if isinstance(value, str):
        return count_text(value)
    if not isinstance(value, list):
        return length(_dump(value))
    n = 0
    for part in value:
        kind = part.get("type") if isinstance(part, dict) else None
        n += TOKENS_PER_PART
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            n += count_text(part["text"])
        elif kind in MEDIA:
            n += MEDIA[kind]
        else:
            n += length(part if isinstance(part, str) else _dump(part))
    return n


RESPONSES = ResponsesDialect()
