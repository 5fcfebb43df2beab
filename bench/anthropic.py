"""The dev corpus through the Anthropic Messages path, beside the chat form, in one run.

    .venv/bin/python -m bench.anthropic [DIR] [--windows 16384,8192,4096]

Each conversation is converted to a Messages request (bench/anthropic_form.py) and planned by the
same `Shrinker` as `/v1/messages` plans it (the Anthropic wire format: `system` and `tools` fixed,
tool_use/tool_result pairs as units, the marker a user turn), and its chat form is planned as
`/v1/chat/completions` does. Reported per window, for both forms:

- quality (bench/quality.py's measure): needles kept by class, tokens saved, fits, pairing;
- prefix stability (bench/prefix.py's measure): every turn an agent sends, replayed through one
  Shrinker per window; a break is a turn whose shrunk request does not start with the previous
  turn's, and reuse the share of prompt tokens a prefix cache could serve.

The two forms count differently (an Anthropic request carries its tool results in blocks and
its system outside the messages), so their budgets bind at slightly different turns; the figures
say how close the engine comes to the same result through either API.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from bench import corpus, forms
from bench.anthropic_form import haystack, pairing_ok, to_anthropic
from bench.corpus import Conversation
from bench.prefix import Renderer, Tally3, replay, summary
from proxy.pipeline import Report
from proxy.shrinker import Shrinker
from proxy.wire.formats import ANTHROPIC_WIRE

WINDOWS = (16384, 8192, 4096)
Message = dict[str, Any]


class AnthropicRenderer(Renderer):
    """Renderer's per-message tokens, of a Messages message's texts and tool inputs."""

    def tokens(self, message: Message) -> list[int]:
        key = repr(message).encode()
        out = self.cache.get(key)
        if out is None:
            text = f"<|{message.get('role')}|>\n{haystack({'messages': [message]})}\n"
            out = self.cache[key] = self.encoding.encode_ordinary(text)
        return out


@dataclasses.dataclass(frozen=True)
class AnthropicConversation(Conversation):
    """A conversation converted whole, so its turns are what a Messages client sends: before
    each assistant message of the converted form (converting each chat turn apart would merge
    consecutive assistant messages differently from turn to turn, breaks no client makes)."""

    base: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, conv: Conversation, max_tokens: int) -> AnthropicConversation:
        base = to_anthropic(conv.request(), default_max_tokens=max_tokens)
        return cls(conv.id, conv.description, conv.tools, base["messages"], conv.needles, base)

    def request(self, messages: list[Message] | None = None) -> dict[str, Any]:
        return {**self.base, "messages": self.messages if messages is None else messages}


def anthropic_plan(sh: Shrinker) -> Any:
    """bench.prefix's plan function for Messages requests."""

    def run(body: dict[str, Any]) -> tuple[list[Message], bool, Report | None]:
        p = sh.plan_sync(body, "auto", fmt=ANTHROPIC_WIRE)
        return p.messages, p.report.fits, p.report

    return run


def chat_plan(sh: Shrinker) -> Any:
    def run(body: dict[str, Any]) -> tuple[list[Message], bool, Report | None]:
        p = sh.plan_sync(body, "auto")
        return p.messages, p.report.fits, p.report

    return run


def reserve(sh: Shrinker) -> int:
    """The `max_tokens` the Messages form carries (the API requires one): the reserve the chat
    form gets by default, so both forms plan for the same budget."""
    s = sh.settings
    return min(s.completion_reserve, s.context_window // 4)


def quality(convs: list[Conversation], sh: Shrinker, form: str) -> dict[str, Any]:
    """bench.forms.quality of the corpus in `form` ("chat" or "anthropic")."""

    def shrunk(conv: Conversation) -> tuple[Report, str, bool]:
        if form == "chat":
            return forms.chat_shrunk(sh, conv)
        body = to_anthropic(conv.request(), default_max_tokens=reserve(sh))
        plan = sh.plan_sync(body, "auto", fmt=ANTHROPIC_WIRE)
        out = {**body, "messages": plan.messages}
        return plan.report, haystack(out), pairing_ok(out)

    return forms.quality(convs, shrunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus.add_arguments(parser, WINDOWS)
    args, overrides, convs, tokenizers = corpus.start(parser)
    counter = tokenizers.for_model(corpus.MODEL)
    renderers = {"chat": Renderer(counter), "anthropic": AnthropicRenderer(counter)}
    print(f"corpus: {args.dir or corpus.DEFAULT_DIR} ({len(convs)} conversations)")
    for window in args.windows:
        print(f"\n=== window {window:,} ({args.set or 'default settings'}) ===")
        prefix: dict[str, Tally3] = {}
        for form in ("chat", "anthropic"):
            # A fresh Shrinker per form and window: neither form warms the other's memo.
            sh = Shrinker(corpus.settings(context_window=window, **overrides), tokenizers)
            print(forms.quality_line(form, quality(convs, sh, form)))
            sh = Shrinker(corpus.settings(context_window=window, **overrides), tokenizers)
            if form == "anthropic":
                converted = [AnthropicConversation.of(c, reserve(sh)) for c in convs]
                prefix[form] = replay(list(converted), anthropic_plan(sh), renderers[form])
            else:
                prefix[form] = replay(convs, chat_plan(sh), renderers[form])
        for form, t in prefix.items():
            print(summary(form, t).replace(f"  {form:<5}", f"  {form:<9} prefix", 1))


if __name__ == "__main__":
    main()
