"""bench.responses: the dev corpus in Responses form keeps what its chat form keeps; dressed as
Codex sends it, nearly: its reasoning items (one per model response, ~50 tokens each, kept whole)
take room the chat form gives to history (6 conversations at 8k: 25 needles of 38 against 27)."""

from __future__ import annotations

import pytest

from bench import corpus
from bench.responses import ResponsesRenderer, prefix, quality
from proxy.shrinker import Shrinker


@pytest.mark.parametrize(("form", "slack"), [("responses", 0), ("codex", 1)])
def test_the_responses_form_keeps_the_chat_forms_needles_and_prefixes(
    form: str, slack: int
) -> None:
    corpus.setup_environment()
    convs = corpus.load()[:6]
    tokenizers = corpus.tokenizers()
    sh = Shrinker(corpus.settings(context_window=8192), tokenizers)
    chat, responses = quality(convs, sh, "chat"), quality(convs, sh, form)
    assert responses["paired"] == responses["fits"] == len(convs)
    assert abs(sum(responses["kept"].values()) - sum(chat["kept"].values())) <= 2 + slack
    assert responses["kept"]["critical"] >= chat["kept"]["critical"] - 1 - slack
    sh = Shrinker(corpus.settings(context_window=8192), tokenizers)
    t = prefix(convs, sh, form, ResponsesRenderer(tokenizers.for_model(corpus.MODEL)))
    assert t.fits == t.turns and t.break_share <= 0.05
