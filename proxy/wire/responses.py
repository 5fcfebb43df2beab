"""OpenAI Responses wire format: parse just enough of a `/v1/responses` request.

`input` is what the engine plans (proxy.pipeline.responses); `instructions` and `tools` are
counted as fixed tokens and forwarded as sent, and so is every other field (`store`,
`include`, `reasoning`, `prompt_cache_key`, ...). A string `input` is one user message: the
parsed body holds it as a one-item list, which goes upstream only if the plan changed it.

A request that continues server-held history (`previous_response_id`, a `conversation`, or
`item_reference` items) is one the proxy sees only part of: it cannot cut what it does not
see, nor know whether it fits, so such a request is planned in `tools` mode (its tool outputs
compacted) and said so (`SERVER_HISTORY` in `x-shrink-actions`).
"""

from __future__ import annotations

from typing import Any

from proxy.errors import InvalidRequest
from proxy.wire import MAX_DEPTH, _depth_ok, parse_json

SERVER_HISTORY = "previous_response_id"
_HELD = ("previous_response_id", "conversation")


def parse_responses(raw: bytes) -> dict[str, Any]:
    """The body of a Responses request, or `InvalidRequest` (400) saying what is wrong."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    items = body.get("input")
    if isinstance(items, str):
        body["input"] = [{"role": "user", "content": items}]
    elif items is None:
        body["input"] = []
    elif not isinstance(items, list):
        raise InvalidRequest(
            "Invalid type for 'input': expected a string or an array of input items.",
            param="input",
        )
    else:
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise InvalidRequest(
                    f"Invalid type for 'input[{i}]': expected an object.", param=f"input[{i}]"
                )
        if not _depth_ok(items, MAX_DEPTH):
            raise InvalidRequest(f"'input' is nested deeper than {MAX_DEPTH} levels.")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, (str, list)):
        raise InvalidRequest(
            "Invalid type for 'instructions': expected a string.", param="instructions"
        )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("Invalid type for 'model': expected a string.", param="model")
    return body


def server_history(body: dict[str, Any]) -> bool:
    """Whether the request continues history the server holds (not in `input`): a previous
    response or a conversation, or an `item_reference` item (a stored item, by its id)."""
    if any(body.get(key) not in (None, "") for key in _HELD):
        return True
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(i, dict) and i.get("type") == "item_reference" for i in items
    )


def retrieval_offered(body: dict[str, Any]) -> bool:
    """Whether the in-flight `shrink_retrieve` tool may go with this request. Not when the
    server holds history (the proxy cannot count the room the prompt leaves, and a marker in
    that history was issued by another request, so its hash would be refused). Not in a stream
    the server stores (`store` absent or true): a stream keeps one response id from its
    `response.created` to its end (the openai SDK checks it), the first round's, and that
    stored response ends in our call, unanswered, which would break a next turn chained on it
    with `previous_response_id`. A non-stream answer takes the last round's id, whose stored
    history is complete (see proxy.retrieval.responses)."""
    if server_history(body):
        return False
    return body.get("stream") is not True or body.get("store") is False
