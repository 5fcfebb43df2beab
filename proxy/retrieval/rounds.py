"""The state of one request's retrieval rounds, shared by the non-stream loop
(proxy.retrieval.loop) and the stream's (proxy.retrieval.stream): the calls, the pages that fit
the room the prompt left, the body that continues the generation, usage summed over rounds, and
a continuation's refusal in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from proxy.errors import ProxyError
from proxy.retrieval.store import Store
from proxy.retrieval.tool import NAME
from proxy.retrieval.tool import answer as tool_answer

if TYPE_CHECKING:
    from proxy.settings import Settings

ROUNDS_HEADER = "x-shrink-retrieve-rounds"
LIMIT_HEADER = ("x-shrink-retrieve-limit", "reached")
# A page smaller than this is no use to a model: past it, the call is told there is no room.
MIN_PAGE_TOKENS = 48
NO_ROOM = (
    "shrink_retrieve: no room is left in the context window for more retrieved text; answer "
    "with what you have."
)
# The answer to a call of the client's made beside ours, where the format wants the round's
# message echoed whole (Messages with thinking; Responses' reasoning items with what follows
# them): the proxy cannot run it, the client never sees it, and the model makes it again.
NOT_RUN = (
    "Not run: shrink-proxy answered shrink_retrieve first. Make this call again if you still "
    "need it."
)
# A body this large is parsed off the event loop (see proxy.planner on a big body's parse).
THREAD_PARSE_BYTES = 1 << 20
ERROR_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Call:
    """One tool call of the assistant, assembled (from a message, or from stream deltas)."""

    id: str
    name: str
    arguments: str
    kind: str = "function"  # Responses' custom tools are answered by another item type

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Shape:
    """What a wire format's continuation appends after a round: the round's own items (the
    format's loop builds them from what the model said) and then `results`, the answers to the
    retrieval calls; `result` is one answer alone, as the page's fit is counted."""

    name: str  # the WireFormat's
    field: str  # where the body keeps the list (`messages`, `input`)
    result: Callable[[Call, str], Any]
    results: Callable[[list[Call], list[str]], list[Any]]
    # The body's list as a list (Responses' `input` may be a bare string).
    items: Callable[[dict[str, Any]], list[Any]] = lambda body: list(body["messages"])


def chat_result(call: Call, reply: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "content": reply}


def chat_said(text: str | None, calls: list[Call]) -> dict[str, Any]:
    """The assistant message of a chat round that called the retrieval tool."""
    return {"role": "assistant", "content": text or None, "tool_calls": [c.wire() for c in calls]}


CHAT_SHAPE = Shape(
    "chat",
    "messages",
    chat_result,
    lambda calls, replies: [chat_result(c, r) for c, r in zip(calls, replies, strict=True)],
)


@dataclass
class Rounds:
    """The loop's state for one request. The flow builds it before it drops the parsed body
    (only the bytes sent stay), so the continuation re-parses those once, on its first round."""

    content: bytes  # the body as forwarded, our tool in its `tools`
    issued: Collection[str]  # the refs this request's markers name: the only ones served
    room: int  # tokens of the budget the prompt left free
    counter: Any  # the request's token counter (planning units, as `room`)
    settings: Settings
    stream: bool
    strip_usage: bool  # the proxy asked for the stream's usage chunk, not the client
    dump: Callable[[dict[str, Any]], bytes]  # proxy.flow.dump_deep: any depth the wire reads
    single: bool = True  # one choice (`n` 1): the only generation a continuation can extend
    shape: Shape = CHAT_SHAPE
    served: int = 0  # rounds served
    added: int = 0  # tokens the served rounds added to the prompt
    usages: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # content of the rounds continued
    limited: bool = False  # retrieval calls were taken out, unserved
    _body: dict[str, Any] | None = None
    _extra: list[dict[str, Any]] = field(default_factory=list)

    @property
    def can_continue(self) -> bool:
        return self.single and self.served < self.settings.retrieve_rounds

    def note_usage(self, usage: Any) -> None:
        """The usage of a round continued (the final round's is summed in `total_usage`)."""
        if isinstance(usage, dict):
            self.usages.append(usage)

    def total_usage(self, last: dict[str, Any]) -> dict[str, Any]:
        """`last` (the final round's usage) with the figures summed over every round."""
        return summed([*self.usages, last])

    async def next_body(
        self, store: Store, said: list[Any], calls: list[Call], text: str | None = None
    ) -> bytes:
        """Serve `calls` (the round's retrieval calls, and in the formats that echo a round whole
        the client's calls beside them) and the body that continues the generation:
        the body as sent, every round's `said` items and its results. `text`: what the round
        showed the client, kept for a non-stream answer that joins every round's text."""
        grown = sum(self.counter.count_message(item) for item in said)
        ours = sum(1 for c in calls if c.name == NAME) or 1  # the others are answered NOT_RUN
        share = (self.room - self.added - grown) // ours
        replies = [await self.page(store, call, share) for call in calls]
        results = self.shape.results(calls, replies)
        self.added += grown + sum(self.counter.count_message(r) for r in results)
        self._extra += [*said, *results]
        self.served += 1
        if text:
            self.texts.append(text)
        if self._body is None:
            if len(self.content) > THREAD_PARSE_BYTES:
                self._body = await anyio.to_thread.run_sync(orjson.loads, self.content)
            else:
                self._body = orjson.loads(self.content)
        body = self._body
        assert body is not None
        return self.dump({**body, self.shape.field: [*self.shape.items(body), *self._extra]})

    async def page(self, store: Store, call: Call, room: int) -> str:
        """The tool result for one call, a page that fits `room` tokens: a first guess of four
        bytes a token, then smaller pages (as counted) until one fits; a refusal is short. A
        call of the client's (the formats that echo a round whole) is answered NOT_RUN."""
        if call.name != NAME:
            return NOT_RUN
        if room < MIN_PAGE_TOKENS:
            return NO_ROOM
        max_bytes = min(self.settings.retrieve_page_bytes, room * 4)
        for _ in range(4):
            reply = await tool_answer(
                store,
                self.issued,
                call.arguments,
                max_lines=self.settings.retrieve_page_lines,
                max_bytes=max_bytes,
            )
            n = self.counter.count_message(self.shape.result(call, reply))
            if n <= room:
                return reply
            max_bytes = int(max_bytes * room / n * 0.9)
            if max_bytes < MIN_PAGE_TOKENS:
                break
        return NO_ROOM

    def headers(self) -> list[tuple[str, str]]:
        out = [(ROUNDS_HEADER, str(self.served))]
        return [*out, LIMIT_HEADER] if self.limited else out

    def log_fields(self) -> dict[str, Any]:
        return {"retrieve_rounds": self.served, "retrieve_limited": self.limited or None}


def summed(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """The last usage with its token figures summed over all (the cached prompt tokens too,
    inside `prompt_tokens_details`, when the last one reports them); other fields as the last
    round's."""
    if len(usages) == 1:
        return usages[0]
    out = dict(usages[-1])
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if isinstance(out.get(key), int):
            out[key] = sum(n for u in usages if isinstance(n := u.get(key), int))
    details = out.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        out["prompt_tokens_details"] = {
            **details,
            "cached_tokens": sum(
                n
                for u in usages
                if isinstance(d := u.get("prompt_tokens_details"), dict)
                and isinstance(n := d.get("cached_tokens"), int)
            ),
        }
    return out


def split_calls(message: Any) -> tuple[list[Call], list[Any]]:
    """(the retrieval calls of an assistant message, its other tool calls as sent)."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    ours: list[Call] = []
    theirs: list[Any] = []
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and fn.get("name") == NAME:
            args = fn.get("arguments")
            ours.append(Call(call.get("id") or f"call_shrink_{i}", NAME, as_text(args)))
        else:
            theirs.append(call)
    return ours, theirs


def as_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return orjson.dumps(arguments).decode() if arguments is not None else "{}"


def upstream_error(status: int, body: bytes) -> ProxyError:
    """A continuation round's refusal as a ProxyError in OpenAI's shape (the upstream's own
    message, type and code when it sent an error object), for the client of a started stream."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, str):
        err = {"message": err}
    if not isinstance(err, dict):
        err = {}
    message = err.get("message")
    if not isinstance(message, str) or not message:
        message = f"The upstream answered {status} to a continuation after shrink_retrieve."
    code = err.get("code")
    exc = ProxyError(message, code=str(code) if code is not None else f"upstream_{status}")
    exc.status = status
    if isinstance(err.get("type"), str):
        exc.type = err["type"]
    return exc
