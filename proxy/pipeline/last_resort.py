"""Stage 3, the last resort: cut the largest texts head+tail until the messages fit.

When even the smallest set of messages stage 2 may keep does not fit, the texts that are left
are cut at both ends, never dropped: the head of a tool's output says what ran, the tail how it
ended, and a marker in the middle says how much is gone. Texts are levelled ("water-filling"), so
one long text does not vanish while another stays whole. With retrieval on, each cut's marker
names the hash of the text it cut (proxy.pipeline.refs), which the plan keeps: nothing is lost.

Pure: no I/O, inputs are never mutated.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from itertools import accumulate

from proxy.pipeline.dialect import CHAT, Dialect
from proxy.pipeline.refs import span_note
from proxy.pipeline.types import Message

CountMessage = Callable[[Message], int]
CountText = Callable[[str], int]
RefOf = Callable[[str], str]


# A message with more text parts than this has its runs of them joined before stage 3 cuts it:
# a part shorter than a marker cannot be cut, so two thousand small ones could never shrink.
MANY_PARTS = 16


def last_resort(
    messages: list[Message],
    budget: int,
    count: CountMessage,
    count_text: CountText,
    *,
    protect: Collection[int] = (),
    dialect: Dialect = CHAT,
    ref_of: RefOf | None = None,
) -> tuple[list[Message], list[tuple[int, int, int]], bool, dict[str, str]]:
    """Stage 3: cut the largest texts head+tail, largest first, until the messages fit `budget`.

    Texts are levelled ("water-filling"): every text above a common level is cut to that level,
    so a long system prompt and a long tool result share the loss instead of one vanishing.
    Each attempt cuts the original texts (never a cut of a cut) and lowers the level by what is
    still over. Positions in `protect` (the latest user message, the marker) are never altered;
    tool-call arguments are never touched; a message of many text parts is cut as the texts of
    their runs joined (`Dialect.joined`). `ref_of`: the ref of a text, named in its cut's
    marker (retrieval on). Returns (messages, [(position, before, after)], fits, {ref: the text
    it names} of the cuts made).
    """
    counts = [count(m) for m in messages]
    work = [m if i in protect else dialect.joined(m, MANY_PARTS) for i, m in enumerate(messages)]
    slots = [
        (i, j, text, count_text(text))
        for i, m in enumerate(work)
        if i not in protect
        for j, text in dialect.texts(m)
    ]
    sizes = sorted((t for *_, t in slots), reverse=True)
    affected = sum(counts[i] for i in {i for i, *_ in slots})
    # Message counts include JSON escaping and overhead; convert the excess into text tokens.
    ratio = min(1.0, sum(sizes) / affected) if affected else 1.0
    out, new_counts = list(messages), list(counts)
    cut = (sum(counts) - budget) * ratio
    named: dict[int, str] = {}  # slot -> the ref of its text, once it was cut
    made: list[tuple[int, str, str]] = []  # (position, ref, text) of the last attempt's cuts
    for _ in range(8):
        if sum(new_counts) <= budget or not slots:
            break
        level = _level(sizes, int(cut) + 1)
        out, new_counts, made = list(messages), list(counts), []
        for n, (i, j, text, tokens) in enumerate(slots):
            if tokens > level:
                base = out[i] if out[i] is not messages[i] else work[i]
                ref = None
                if ref_of is not None:
                    if n not in named:
                        named[n] = ref_of(text)
                    ref = named[n]
                    made.append((i, ref, text))
                shrunk = shrink_text_head_tail(text, level, count_text, ref)
                out[i] = dialect.with_text(base, j, shrunk)
        for i in {i for i, *_ in slots}:
            if out[i] is not messages[i]:
                new_counts[i] = count(out[i])
                if new_counts[i] >= counts[i]:  # never grow a message
                    out[i], new_counts[i] = messages[i], counts[i]
        if level == 0:
            break
        cut += max(sum(new_counts) - budget, 0) * ratio + 1
    changes = [(i, counts[i], new_counts[i]) for i in range(len(out)) if out[i] is not messages[i]]
    refs = {ref: text for i, ref, text in made if out[i] is not messages[i]}
    return out, changes, sum(new_counts) <= budget, refs


def _level(sizes: list[int], excess: int) -> int:
    """The largest level L with sum(max(0, s - L)) >= excess over sizes sorted descending."""
    removed = 0
    for n, size in enumerate(sizes, start=1):
        below = sizes[n] if n < len(sizes) else 0
        # Lowering the top n sizes from `size` to `below` removes n * (size - below) more.
        if removed + n * (size - below) >= excess:
            return max(0, size - (excess - removed + n - 1) // n)
        removed += n * (size - below)
    return 0


def _omitted(n: int, noun: str, tokens: int, ref: str | None = None) -> str:
    """Same words as stage 1's markers (`proxy.pipeline.compact.markers`), so both read alike;
    `ref`: where the whole text is (proxy.pipeline.refs)."""
    plural = "" if n == 1 else "s"
    tok = "token" if tokens == 1 else "tokens"
    where = f".{span_note(ref)}" if ref is not None else ""
    return f"[... {n:,} {noun}{plural} ({tokens:,} {tok}) omitted by shrink-proxy{where} ...]"


def shrink_text_head_tail(
    text: str, max_tokens: int, count_text: CountText, ref: str | None = None
) -> str:
    """Keep the head and tail of `text` within `max_tokens`, with a marker for the middle.

    Cuts at line boundaries (the head of tool output says what ran, the tail how it ended); a
    text whose lines are too long to keep even one is cut at character boundaries instead.
    Returns `text` itself when it already fits, and just the marker when nothing else does.
    The whole text is counted once: the omitted count is the whole minus the kept ends. `ref`:
    the text's, named in the marker (its room is counted like the rest of the marker's).
    """
    full = count_text(text)
    if full <= max_tokens:
        return text
    lines = text.splitlines(keepends=True)

    def join(head: str, tail: str, n: int, noun: str) -> str:
        omitted = max(0, full - count_text(head) - count_text(tail))
        sep = "" if not head or head.endswith("\n") else "\n"
        return head + sep + _omitted(n, noun, omitted, ref) + ("\n" + tail if tail else "")

    def by_lines(n: int) -> str:
        head, tail = lines[: n - n // 2], lines[len(lines) - n // 2 :] if n // 2 else []
        return join("".join(head), "".join(tail), len(lines) - n, "line")

    def by_chars(n: int) -> str:
        head, tail = text[: n - n // 2], text[len(text) - n // 2 :] if n // 2 else ""
        return join(head, tail, len(text) - n, "char")

    # Where to start looking: the lines whose characters the budget holds at the text's own
    # token density (a search over the whole range counts dozens of candidates a text).
    keep_chars = len(text) * max_tokens // max(1, full)
    guess = _lines_within([len(line) for line in lines], keep_chars)
    best = (
        _largest_fit(by_lines, len(lines) - 1, max_tokens, count_text, max(1, guess))
        if len(lines) > 1
        else None
    )
    if best is None or count_text(best) < max_tokens // 2:
        chars = _largest_fit(by_chars, len(text) - 1, max_tokens, count_text, max(1, keep_chars))
        if chars is not None and (best is None or len(chars) > len(best)):
            best = chars
    return best if best is not None else by_chars(0)


def _lines_within(lengths: list[int], chars: int) -> int:
    """The most lines `by_lines` can keep (half from each end) within `chars` characters."""
    head = list(accumulate(lengths, initial=0))
    tail = list(accumulate(reversed(lengths), initial=0))
    low, high = 0, len(lengths) - 1
    while low < high:  # the largest n with head[n - n // 2] + tail[n // 2] <= chars
        mid = (low + high + 1) // 2
        if head[mid - mid // 2] + tail[mid // 2] <= chars:
            low = mid
        else:
            high = mid - 1
    return low


def _largest_fit(
    render: Callable[[int], str],
    high: int,
    max_tokens: int,
    count_text: CountText,
    guess: int | None = None,
) -> str | None:
    """render(n) for the largest n in [1, high] that fits `max_tokens` (binary search), or None.
    `guess`: where the answer likely is; the search first brackets it by doubling steps from
    there, so a good guess costs a few counts instead of log2(high)."""
    low, found = 1, None
    if guess is not None and 1 <= guess <= high:
        candidate = render(guess)
        if count_text(candidate) <= max_tokens:
            found, low, step = candidate, guess + 1, max(1, guess // 4)
            while low <= high:  # up, doubling, until a candidate does not fit
                probe = min(high, guess + step)
                candidate = render(probe)
                if count_text(candidate) > max_tokens:
                    high = probe - 1
                    break
                found, low, guess, step = candidate, probe + 1, probe, step * 2
        else:
            high, step = guess - 1, max(1, guess // 4)
            while high >= low:  # down, doubling, until a candidate fits
                probe = max(low, guess - step)
                candidate = render(probe)
                if count_text(candidate) <= max_tokens:
                    found, low = candidate, probe + 1
                    break
                high, guess, step = probe - 1, probe, step * 2
    while low <= high:
        mid = (low + high) // 2
        candidate = render(mid)
        if count_text(candidate) <= max_tokens:
            found, low = candidate, mid + 1
        else:
            high = mid - 1
    return found
