"""bench.anthropic: the dev corpus in Messages form keeps what its chat form keeps."""

from __future__ import annotations

from bench import corpus
from bench.anthropic import (
    AnthropicConversation,
    AnthropicRenderer,
    anthropic_plan,
    quality,
    reserve,
)
from bench.prefix import replay
from proxy.shrinker import Shrinker


def test_the_messages_form_keeps_the_chat_forms_needles_and_prefixes() -> None:
    corpus.setup_environment()
    convs = corpus.load()[:6]
    tokenizers = corpus.tokenizers()
    sh = Shrinker(corpus.settings(context_window=8192), tokenizers)
    chat, messages = quality(convs, sh, "chat"), quality(convs, sh, "anthropic")
    assert messages["paired"] == messages["fits"] == len(convs)
    assert abs(sum(messages["kept"].values()) - sum(chat["kept"].values())) <= 2
    assert messages["kept"]["critical"] >= chat["kept"]["critical"] - 1
    sh = Shrinker(corpus.settings(context_window=8192), tokenizers)
    converted = [AnthropicConversation.of(c, reserve(sh)) for c in convs]
    renderer = AnthropicRenderer(tokenizers.for_model(corpus.MODEL))
    t = replay(list(converted), anthropic_plan(sh), renderer)
    assert t.fits == t.turns and t.break_share <= 0.05
