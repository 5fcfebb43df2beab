"""Markers: the exact wording of every note compaction leaves where it removed something.

The model reads these notes, so they must say what was removed and how much, and always in the
same words (a prompt that changes wording between turns breaks backend prefix caches). All marker
text lives here; the strategies only pass numbers in. Every marker names shrink-proxy so a reader
can tell our elisions from the program's own `...`.
"""

from __future__ import annotations

import re

SIGNATURE = "omitted by shrink-proxy"

# Any marker we emit, for recognising our own output (kept with priority, never cut again).
# Its words are looked for ahead, then the note is read once up to its first bracket (none of our
# notes holds one): `[^\]\n]*` on both sides of the words read the rest of the line again from
# every `[... ` and for every place the words could be.
MARKER_RE = re.compile(
    r"\[\.\.\. (?=[^\[\]\n]*?(?:shrink-proxy|repeated \d[\d,]* more times))[^\[\]\n]*+"
    r"(?<= \.\.\.)\]"
)


def _n(value: int) -> str:
    """Thousands separators: 9310 -> '9,310'."""
    return f"{value:,}"


def _plural(count: int, word: str) -> str:
    return f"{_n(count)} {word}" if count == 1 else f"{_n(count)} {word}s"


def lines_omitted(lines: int, tokens: int) -> str:
    """A gap of ordinary lines: `[... 412 lines (9,310 tokens) omitted by shrink-proxy ...]`."""
    return f"[... {_plural(lines, 'line')} ({_plural(tokens, 'token')}) {SIGNATURE} ...]"


def outline_head(lines: int, tokens: int, what: str = "definitions") -> str:
    """A gap whose map follows (source definitions, a diff's headers), verbatim, up to
    `outline_end`."""
    return (
        f"[... {_plural(lines, 'line')} ({_plural(tokens, 'token')}) {SIGNATURE}; "
        f"the {what} among them: ...]"
    )


def outline_end() -> str:
    return "[... end of the lines listed by shrink-proxy ...]"


def similar_omitted(lines: int, tokens: int) -> str:
    """A gap inside a run of near-identical lines (same text but for numbers, names, sizes)."""
    return (
        f"[... {_n(lines)} more similar {'line' if lines == 1 else 'lines'} "
        f"({_plural(tokens, 'token')}) {SIGNATURE} ...]"
    )


def repeated(times: int) -> str:
    """A gap made only of exact copies of the line above it."""
    return f"[... previous line repeated {_n(times)} more {'time' if times == 1 else 'times'} ...]"


def chars_omitted(chars: int, tokens: int) -> str:
    """The middle of one very long line or string: `[... 4,210 chars (1,050 tokens) ...]`."""
    return f"[... {_plural(chars, 'char')} ({_plural(tokens, 'token')}) {SIGNATURE} ...]"


def items_omitted(items: int, tokens: int) -> str:
    """A JSON array element standing for the items removed from its middle."""
    noun = "item" if items == 1 else "items"
    return f"... {_n(items)} more {noun} ({_plural(tokens, 'token')}) {SIGNATURE} ..."


def keys_omitted(keys: int, tokens: int) -> str:
    """A JSON object key standing for the members removed from its middle (its value is null)."""
    noun = "key" if keys == 1 else "keys"
    return f"... {_n(keys)} more {noun} ({_plural(tokens, 'token')}) {SIGNATURE} ..."


def container_omitted(kind: str, size: int, tokens: int) -> str:
    """A JSON string standing for a whole nested object or array below the kept depth."""
    unit = "key" if kind == "object" else "item"
    return f"... {kind} with {_plural(size, unit)} ({_plural(tokens, 'token')}) {SIGNATURE} ..."


def text_omitted(chars: int, tokens: int) -> str:
    """Last resort, when not even whole lines fit: the middle of the text, counted in chars."""
    return chars_omitted(chars, tokens)
