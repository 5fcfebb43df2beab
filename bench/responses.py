"""The dev corpus through the Responses path, beside the chat form, in one run.

    .venv/bin/python -m bench.responses [DIR] [--windows 16384,8192,4096]

Each conversation is converted to a Responses request (bench/responses_form.py) and planned by
the same `Shrinker` as `/v1/responses` plans it (`instructions` and `tools` fixed, a model
response and its outputs one unit by call_id, the marker a message item); `codex` is the same
request dressed as Codex sends it (a reasoning item with `encrypted_content` opening every model
response). Its chat form is planned as `/v1/chat/completions` does. Reported per window, for
each form:

- quality (bench/quality.py's measure): needles kept by class, tokens saved, fits, pairing;
- prefix stability (bench/prefix.py's measure): every turn an agent sends, replayed through one
  Shrinker per window; a break is a turn whose shrunk request does not start with the previous
  turn's, and reuse the share of prompt tokens a prefix cache could serve.

The conversion is item by item, so a turn converted on its own is a prefix of the whole
conversation converted: the turns are the chat form's, each converted as a client sends it.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from bench import corpus, forms
from bench.corpus import Conversation
from bench.prefix import Renderer, Tally3, replay, summary
from bench.responses_form import codex, haystack, pairing_ok, to_responses
from proxy.pipeline import Report
from proxy.shrinker import Shrinker
from proxy.wire.formats import RESPONSES_WIRE

WINDOWS = (16384, 8192, 4096)
FORMS = ("chat", "responses", "codex")
Item = dict[str, Any]


def convert(chat_body: dict[str, Any], form: str) -> dict[str, Any]:
    body = to_responses(chat_body)
    return codex(body) if form == "codex" else body


class ResponsesRenderer(Renderer):
    """Renderer's per-item tokens, of an item's texts and call arguments (reasoning: none)."""

    def tokens(self, message: Item) -> list[int]:
        key = repr(message).encode()
        out = self.cache.get(key)
        if out is None:
            head = message.get("role") or message.get("type")
            text = f"<|{head}|>\n{haystack({'input': [message]})}\n"
            out = self.cache[key] = self.encoding.encode_ordinary(text)
        return out


@dataclasses.dataclass(frozen=True)
class ResponsesConversation(Conversation):
    """A conversation whose requests are its chat turns converted (see the module's docstring)."""

    form: str = "responses"

    @classmethod
    def of(cls, conv: Conversation, form: str) -> ResponsesConversation:
        return cls(conv.id, conv.description, conv.tools, conv.messages, conv.needles, form)

    def request(self, messages: list[Item] | None = None) -> dict[str, Any]:
        return convert(super().request(messages), self.form)


def plan_fn(sh: Shrinker, form: str) -> Any:
    """bench.prefix's plan function for one form."""
    fmt = {} if form == "chat" else {"fmt": RESPONSES_WIRE}

    def run(body: dict[str, Any]) -> tuple[list[Item], bool, Report | None]:
        p = sh.plan_sync(body, "auto", **fmt)
        return p.messages, p.report.fits, p.report

    return run


def quality(convs: list[Conversation], sh: Shrinker, form: str) -> dict[str, Any]:
    """bench.forms.quality of the corpus in `form` ("chat", or a form of `convert`)."""

    def shrunk(conv: Conversation) -> tuple[Report, str, bool]:
        if form == "chat":
            return forms.chat_shrunk(sh, conv)
        body = convert(conv.request(), form)
        plan = sh.plan_sync(body, "auto", fmt=RESPONSES_WIRE)
        out = {**body, "input": plan.messages}
        return plan.report, haystack(out), pairing_ok(out)

    return forms.quality(convs, shrunk)


def prefix(convs: list[Conversation], sh: Shrinker, form: str, renderer: Renderer) -> Tally3:
    shaped = convs if form == "chat" else [ResponsesConversation.of(c, form) for c in convs]
    return replay(list(shaped), plan_fn(sh, form), renderer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus.add_arguments(parser, WINDOWS)
    args = parser.parse_args()
    corpus.setup_environment()
    overrides = corpus.overrides(args)
    convs = corpus.load(args.dir)
    tokenizers = corpus.tokenizers()
    counter = tokenizers.for_model(corpus.MODEL)
    print(f"corpus: {args.dir or corpus.DEFAULT_DIR} ({len(convs)} conversations)")
    for window in args.windows:
        print(f"\n=== window {window:,} ({args.set or 'default settings'}) ===")
        tallies: dict[str, Tally3] = {}
        for form in FORMS:
            # A fresh Shrinker per form and window: no form warms another's memo.
            sh = Shrinker(corpus.settings(context_window=window, **overrides), tokenizers)
            print(forms.quality_line(form, quality(convs, sh, form)))
            sh = Shrinker(corpus.settings(context_window=window, **overrides), tokenizers)
            renderer = Renderer(counter) if form == "chat" else ResponsesRenderer(counter)
            tallies[form] = prefix(convs, sh, form, renderer)
        for form, t in tallies.items():
            print(summary(form, t).replace(f"  {form:<5}", f"  {form:<9} prefix", 1))


if __name__ == "__main__":
    main()
