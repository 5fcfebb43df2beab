"""The `shrink_retrieve` tool: its one definition (byte-stable, so a tool list that carries it
stays the same turn after turn) and the answer to a call of it.

The proxy adds the tool to an agent's request whose shrunk messages name a ref, and answers the
model's calls itself (proxy.retrieval.loop): only refs this request issued, one bounded page at
a time, so the answer always fits beside the conversation.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.pipeline.refs import REF_RE
from proxy.retrieval.pages import Output, read_page
from proxy.retrieval.store import Gone, Store

NAME = "shrink_retrieve"
DESCRIPTION = (
    "Read back text that shrink-proxy left out of this conversation to fit the context window. "
    "Markers such as `Retrieve more: hash=<24 hex>` name it. Give the hash, and optionally a "
    "line range, or a search string to get only the lines holding it (with their numbers)."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hash": {"type": "string", "description": "The 24 hex characters after `hash=`."},
        "start_line": {"type": "integer", "description": "First line to read (1-based)."},
        "end_line": {"type": "integer", "description": "Last line to read (inclusive)."},
        "search": {
            "type": "string",
            "description": "Only the lines holding this text (case-insensitive; `|` separates "
            "alternatives).",
        },
    },
    "required": ["hash"],
}
# The one definition in each wire format's shape (never changed, so a tool list stays stable).
CHAT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": NAME, "description": DESCRIPTION, "parameters": PARAMETERS},
}
MESSAGES_TOOL: dict[str, Any] = {
    "name": NAME,
    "description": DESCRIPTION,
    "input_schema": PARAMETERS,
}
RESPONSES_TOOL: dict[str, Any] = {
    "type": "function",
    "name": NAME,
    "description": DESCRIPTION,
    "parameters": PARAMETERS,
}


@dataclass(frozen=True)
class Ask:
    ref: str
    start_line: int = 1
    end_line: int | None = None
    search: str | None = None


def parse_arguments(arguments: Any) -> Ask | str:
    """A call's arguments (a JSON string, or an object already parsed): the Ask, or why not."""
    if isinstance(arguments, str | bytes):
        try:
            arguments = orjson.loads(arguments or b"{}")
        except orjson.JSONDecodeError:
            return 'the arguments are not JSON; give an object such as {"hash": "..."}'
    if not isinstance(arguments, dict):
        return 'the arguments must be an object such as {"hash": "..."}'
    ref = arguments.get("hash")
    if not isinstance(ref, str) or not REF_RE.fullmatch("hash=" + ref.strip().lower()):
        return "`hash` must be the 24 hex characters after `hash=` in a marker"
    start, end, search = (arguments.get(k) for k in ("start_line", "end_line", "search"))
    if start is not None and (not isinstance(start, int) or isinstance(start, bool)):
        return "`start_line` must be an integer"
    if end is not None and (not isinstance(end, int) or isinstance(end, bool)):
        return "`end_line` must be an integer"
    if search is not None and not isinstance(search, str):
        return "`search` must be a string"
    return Ask(ref.strip().lower(), max(1, start or 1), end, search or None)


async def answer(
    store: Store, issued: Collection[str], arguments: Any, *, max_lines: int, max_bytes: int
) -> str:
    """The tool result for one call: a page of the text, or a one-line reason it has none."""
    ask = parse_arguments(arguments)
    if isinstance(ask, str):
        return f"shrink_retrieve: {ask}."
    if ask.ref not in issued:
        return (
            f"shrink_retrieve: hash={ask.ref} was not issued in this conversation; use a hash "
            "from a `Retrieve more: hash=` marker above."
        )
    try:
        text = await store.get(ask.ref)
    except Gone as exc:
        return f"shrink_retrieve: {exc}."
    page = read_page(
        Output(ask.ref, "", text, 0.0),
        ask.start_line,
        ask.end_line,
        ask.search,
        max_lines=max_lines,
        max_bytes=max_bytes,
    )
    what = f"lines {page.start_line}-{page.end_line} of {page.total_lines}"
    if page.matches is not None:
        what = f"{page.matches} lines holding {ask.search!r} in " + what
    head = f"[shrink_retrieve hash={ask.ref}: {what}"
    if page.next_start_line is not None:
        head += f"; more from start_line={page.next_start_line}"
    if page.omitted_bytes:
        head += f"; {page.omitted_bytes:,} bytes of a long line not shown"
    return f"{head}]\n{page.text}"
