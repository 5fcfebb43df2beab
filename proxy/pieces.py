"""Pieces: where a text may be cut without changing its token count, to count it in bounded memory.

tiktoken's `encode_ordinary` returns a Python list of ints, ~36 bytes a token: counting a 50 MB
tool output held ~500 MB for a number. Its encodings first split a text with a regex (the
pre-tokenizer, `encoding._pat_str`) and then encode each match alone, so the count of a text is
the sum of the counts of two parts cut where a match always ends: no match crosses the cut, the
matches before it are the same without what follows, and those after it the same without what
precedes (the patterns have no look-behind). For cl100k_base and o200k_base
(CL100K_PATTERN, O200K_PATTERN) these cuts qualify, read off the patterns:

  - after a newline, before a letter, a digit or a punctuation mark other than `/` (a newline
    never starts a match that goes on; o200k's punctuation runs take the `/` after newlines);
  - after a letter or digit, before a space or mark that a letter follows (a word ends at a
    non-letter, and the mark prefixes the next word);
  - after a mark, before a digit or a space (a run of marks ends there);
  - after two marks, the first not a `/`, before a letter (a run of two marks cannot be the
    one-character prefix of the word after it; o200k ends a run with the newlines and `/`
    after it, so a `/` may begin the run that prefixes a word);
  - between a letter and a digit, either way (letters and digits never share a match).

"Letter" means ASCII letters and the letters of Latin-1, basic Greek and Cyrillic, kana, Hangul
and CJK ideographs assigned since Unicode 1.1-2.0 (letters in every version tiktoken's regex
may use), "mark" ASCII punctuation but `'` (contractions: `'s`) and the CJK sentence marks,
"space" a space only. tests/test_tokens.py checks every cut against tiktoken, on the corpus and
on generated text. A stretch of SIZE characters with no such cut (one 20 MB word) is cut anyway:
counted whole, tiktoken's merges take quadratic time (1 MB of one word: 1-2 s); in pieces, the
count may be a token off per piece.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator

# tiktoken_ext.openai_public's patterns (tests/test_tokens.py checks our copies).
CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",  # noqa: E501
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",  # noqa: E501
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# The patterns the cuts below were read from: any other encoding is counted whole.
PATTERNS = frozenset({CL100K_PATTERN, O200K_PATTERN})
# Characters counted at a time: ~1.2 MB of ints at most (about 4 characters a token).
SIZE = 1 << 17

_LETTER = (
    "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u00ff"  # Latin-1 letters (not × or ÷)
    "\u0391-\u03a1\u03a3-\u03a9\u03b1-\u03c9"  # Greek
    "\u0401\u0410-\u044f\u0451"  # Cyrillic
    "\u3041-\u3094\u30a1-\u30fa\u4e00-\u9fa5\uac00-\ud7a3"  # kana, CJK ideographs, Hangul
)
_MARKS = "".join(c for c in string.punctuation if c != "'")
_CJK_MARKS = "\u3001\u3002\uff01\uff0c\uff1a\uff1b\uff1f"  # 、。！，：；？
_MARK = re.escape(_MARKS) + _CJK_MARKS
_MARK_NO_SLASH = re.escape(_MARKS.replace("/", "")) + _CJK_MARKS
_CUT = re.compile(
    rf"(?<=\n)(?=[{_LETTER}0-9{_MARK_NO_SLASH}])"
    rf"|(?<=[{_LETTER}0-9])(?=[ {_MARK}][{_LETTER}])"
    rf"|(?<=[{_MARK}])(?=[0-9 ])"
    rf"|(?<=[{_MARK_NO_SLASH}][{_MARK}])(?=[{_LETTER}])"
    rf"|(?<=[0-9])(?=[{_LETTER}])"
    rf"|(?<=[{_LETTER}])(?=[0-9])"
)


def pieces(text: str, size: int = SIZE, longest: int = SIZE) -> Iterator[str]:
    """`text` in consecutive pieces whose counts add up to its count: each at least `size`
    characters long (but the last), cut at the first cut after that. A stretch of `longest`
    more characters without one (a 20 MB word, a run of marks) is cut where it ends:
    its BPE costs quadratic time whole, and the pieces' counts then add up to within a token or
    so per piece of its count (a piece's ends can merge with nothing)."""
    start, n = 0, len(text)
    while n - start > size:
        cut = _CUT.search(text, start + size, start + size + longest)
        at = cut.start() if cut is not None else start + size + longest
        yield text[start:at]
        start = at
    yield text[start:] if start else text


def utf8_length(text: str) -> int:
    """len(text.encode()) without a copy of the whole text (lone surrogates count 3 bytes, as
    surrogatepass encodes them)."""
    if text.isascii():
        return len(text)
    return sum(
        len(text[i : i + SIZE].encode("utf-8", "surrogatepass")) for i in range(0, len(text), SIZE)
    )
