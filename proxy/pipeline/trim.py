"""History trimming (stage 2) with a sticky cut, then the last resort (stage 3, its own module).

Agents resend the whole history every turn and backends reuse a cached prefix only when a request
starts with exactly the same tokens as the previous one. So the cut must not move every turn, and
a stateless proxy (or several replicas) must agree on it. The cut is found by replaying the
conversation: every prefix of the history is weighed as if it had been a request; the cut stays
while it fits, and when it no longer does it moves as deep as it must to leave `trim_step` of the
budget free (hysteresis), but never below `trim_keep_tokens` kept (on a small window a fifth of
the budget is little more than the system prompt). A prefix's replay depends on that prefix
alone and history only grows, so every later turn arrives at the same cut until the kept tail
has grown by about `trim_step` of the budget. The cut's marker may list key lines of the span it
drops (`note`); the marker is weighed with them, so the list costs exactly its size and never
changes while the cut holds.
When the replayed cut cannot fit (the newest messages alone are too big), candidate cuts where
the running token sum crosses multiples of a step (a sticky grid) are tried. None drops any of
the newest `keep_last` messages: when no cut fits without, those messages stay and their largest
texts are cut head+tail (stage 3, proxy.pipeline.last_resort); only when even that cannot fit are
cuts among them tried, then stage 3 on the newest turn alone.

Pure: no I/O, inputs are never mutated, unchanged messages are returned as the same dict objects.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.pipeline import keys
from proxy.pipeline.dialect import CHAT, Dialect
from proxy.pipeline.last_resort import last_resort
from proxy.pipeline.last_resort import shrink_text_head_tail as shrink_text_head_tail
from proxy.pipeline.refs import span_note, text_ref
from proxy.pipeline.types import Message, Policy
from proxy.pipeline.units import group_units, pinned_count

CountMessage = Callable[[Message], int]
CountText = Callable[[str], int]
Note = Callable[[int], str]
KeyOf = Callable[[Message], bytes | None]


@dataclass(frozen=True)
class Shrunk:
    """A message cut by head+tail in stage 3: its index in the input, tokens before and after."""

    index: int
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True)
class TrimResult:
    """What stages 2 and 3 did, with enough for the orchestrator to fill a Report.

    Indices refer to the input list. tokens_before/after use the caller's `count`.
    """

    messages: list[Message]
    dropped_messages: int
    dropped_tokens: int
    cut: int  # index into the input where the kept history resumes
    carried_user: int | None  # index of a user message carried across the cut, if any
    fits: bool
    tokens_before: int = 0
    tokens_after: int = 0
    shrunk: tuple[Shrunk, ...] = field(default_factory=tuple)  # stage 3 only
    note: str = ""  # what `note` listed under the marker
    user_cut: int | None = None  # the latest user message's index, when stage 3 cut it too
    refs: dict[str, str] = field(default_factory=dict)  # stage 3's cuts: ref -> the text cut


def omitted_marker_text(messages: int, tokens: int, ref: str | None = None) -> str:
    """The one wording of the marker that stands in for dropped history; `ref`: the span's
    (proxy.pipeline.refs), where the model can read it back."""
    noun = "message" if messages == 1 else "messages"
    where = f".{span_note(ref)}" if ref is not None else ""
    return (
        f"[shrink-proxy: {messages:,} earlier {noun} ({tokens:,} tokens) omitted "
        f"to fit the context window{where}]"
    )


def _latest_user(messages: list[Message], dialect: Dialect = CHAT) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if dialect.is_user(messages[i]):
            return i
    return None


def _grid(sums: list[int], step: int) -> list[int]:
    """Units where the running history sum first reaches each multiple of `step`."""
    points: list[int] = []
    j = 1
    for b in range(1, len(sums)):
        if sums[b] >= j * step:
            points.append(b)
            j = sums[b] // step + 1
    return points


def _candidates(
    starts: list[int], sums: list[int], step: int, limit: int
) -> tuple[list[int], list[int]]:
    """Unit indices to try, best first: the sticky grid, then finer grids, then the rest within
    `limit`; and apart, the units beyond it (cuts that drop some of the newest messages).

    starts[b] is the message index where unit b begins; sums[b] the history tokens before it.
    Unit 0 (no cut) is never a candidate and the last unit is always kept. When no point of the
    grid fits within `limit` (the next one falls among the newest messages), the halved grids
    still offer a few sticky points before single units are tried one by one (each of those
    would move the cut on every turn while the coarse grid catches up).
    """
    order: list[int] = []
    seen: set[int] = set()
    level = step
    for _ in range(3):
        for b in _grid(sums, level):
            if b not in seen and starts[b] <= limit:
                order.append(b)
                seen.add(b)
        level = max(1, level // 2)
    rest = range(1, len(starts))
    order += [b for b in rest if b not in seen and starts[b] <= limit]
    return order, [b for b in rest if starts[b] > limit]


def _replay_cut(
    length: int,
    prefix: list[int],
    p: int,
    starts: list[int],
    budget: int,
    policy: Policy,
    weigh: Callable[[int, bool], tuple[int, Message | None, str]],
    noted: bool,
    resume: tuple[int, int] = (0, 0),
) -> int:
    """The cut a forward replay of the conversation arrives at: its unit index (0: no cut).

    Every prefix of the history is replayed as if it had been a request. While the current cut
    fits a prefix it stays; when it no longer fits, the cut moves as deep as it must to leave
    `trim_step` of the budget free for the turns to come, keeping at least `trim_keep_tokens`
    (`Policy.trim_target`; deeper only when the newest `keep_last` messages demand it). A
    prefix's replay depends on that prefix alone, and history only grows, so every later
    request (and every replica) arrives at the same cut
    until the history has grown by about `trim_step` of the budget: hysteresis without state.
    `resume` is (n, cut): the replay of the first n messages already arrived at unit `cut`
    (0: none yet), so only the prefixes after n are replayed.
    """
    total_all = prefix[-1]
    target = policy.trim_target(budget)
    keep = max(policy.keep_last, 0)

    def kept(b: int, n: int, with_note: bool) -> int:
        if b == 0:
            return prefix[n]
        return weigh(b, with_note)[0] - (total_all - prefix[n])

    start, cut = resume
    # kept(b, n, x) only grows with n: a unit that fails a test at n fails it at every later n.
    # So each scan skips the units it has already seen fail since the cut last moved, and each
    # unit is tried O(1) times in all: units cut+1..forward failed the first test, units
    # cut+1..backward the fallback's. `last`: the deepest unit the newest `keep` allow.
    last = forward = backward = cut
    for n in range(max(p + 1, start + 1), length + 1):
        while last + 1 < len(starts) and starts[last + 1] <= n - keep:
            last += 1
        if kept(cut, n, noted) <= budget:
            continue
        best = None
        for b in range(max(forward, cut) + 1, last + 1):
            if kept(b, n, False) <= target and kept(b, n, noted) <= target:
                best = b
                break
            forward = b
        if best is None:
            # The deepest allowed unit that fits the budget, scanning from the deepest down.
            best = next(
                (b for b in range(last, max(backward, cut), -1) if kept(b, n, noted) <= budget),
                None,
            )
            backward = last
        if best is not None:
            cut = best
            forward, backward = max(forward, cut), max(backward, cut)
    return cut


def _resume(
    chain: Sequence[bytes],
    seed: bytes,
    memo: MutableMapping[Hashable, Any],
    starts: list[int],
    p: int,
) -> tuple[int, int]:
    """(n, unit) for the longest prefix whose replay is remembered; (0, 0) for none."""
    unit_at = None
    for n in range(len(chain) - 1, p, -1):
        key = ("replay", seed, chain[n])
        if key not in memo:
            continue
        try:
            k = memo[key]
        except KeyError:  # evicted meanwhile by another thread
            continue
        if k == 0:
            return n, 0
        if unit_at is None:
            unit_at = {s: b for b, s in enumerate(starts)}
        b = unit_at.get(k)
        if b is not None and starts[b] <= n:
            return n, b
    return 0, 0


def _floor(
    chain: Sequence[bytes], key: bytes, memo: MutableMapping[Hashable, Any], p: int
) -> tuple[int, int] | None:
    """(n, k): the longest earlier request of this conversation (its first n messages) was cut
    at message k, whatever its budget; None when none is remembered."""
    for n in range(len(chain) - 1, p, -1):
        try:
            return n, memo[("floor", key, chain[n])]
        except KeyError:
            continue
    return None


def trim_history(
    messages: list[Message],
    budget: int,
    count: CountMessage,
    policy: Policy,
    *,
    count_text: CountText | None = None,
    note: Note | None = None,
    grid_budget: int | None = None,
    key_of: KeyOf | None = None,
    memo: MutableMapping[Hashable, Any] | None = None,
    seed: Hashable = None,
    floor_seed: Hashable = None,
    chain: Sequence[bytes] | None = None,
    floor_chain: Sequence[bytes] | None = None,
    dialect: Dialect = CHAT,
    span_ref: Callable[[int, int], str] | None = None,
) -> TrimResult | None:
    """Drop the oldest history at a sticky cut so the messages fit `budget`; None if they fit.

    `count_text` counts bare text for stage 3; without it the text is counted as a message
    (a few tokens of overhead too many, which only makes stage 3 cut a little deeper).
    `note(k)` is text listed under the marker of a cut at message k (the key lines of the span
    it drops); a cut fits only with its note, whose size is then exactly what it costs, so no
    room is set aside for notes that do not need it. Only when no cut fits with its note are
    cuts tried without one. The note must depend on messages[:k] alone, as the grid does: then
    a cut that fits keeps fitting with the same marker until the kept tail outgrows the budget.
    `grid_budget` (default `budget`) sizes the step of the sticky grid.
    With `memo` and `key_of` (a message's content key), where each prefix's replay ended is
    remembered under a chain of the message keys and `seed` (which must name everything else a
    replay depends on: budget, policy, counter, note): the next turn, which resends the same
    prefix, replays only its new messages. `chain` (keys.prefixes of `messages`), when the
    caller has it, saves building it from `key_of`.

    The replay is a function of the budget too, and not a monotone one: a slightly smaller
    budget can arrive at a shallower cut (the cut moved at other prefixes). A budget that moves
    between turns (calibration, a client varying max_tokens) would then move the cut back and
    forth, each move a full re-read by the backend. So the memo also remembers, under
    `floor_seed` (what a cut depends on besides the messages and the budget), the cut each
    request of the conversation was sent with, and a later request never cuts in front of it:
    its replay resumes from that cut at its own budget, so the cut only moves forward.
    `floor_chain` names the prefixes of the messages as the client sent them (before stage 1,
    whose cuts depend on the window): default `chain`. `span_ref(start, end)`: the ref of the
    dropped messages, named in the marker (proxy.pipeline.refs); a pure function of the span
    as sent, so a cut that stays keeps its marker byte for byte.
    """
    counts = [count(m) for m in messages]
    total = sum(counts)
    if total <= budget:
        return None
    p = pinned_count(messages, dialect)
    pinned_tokens = sum(counts[:p])
    units = group_units(messages, p, dialect)
    starts = [begin for begin, _ in units]
    prefix = [0]
    for c in counts:
        prefix.append(prefix[-1] + c)
    sums = [prefix[s] - prefix[p] for s in starts]
    history_tokens = total - pinned_tokens
    latest_user = _latest_user(messages, dialect)
    user_before: list[int | None] = [None]  # user_before[k]: the last user message before k
    for i, m in enumerate(messages):
        user_before.append(i if dialect.is_user(m) and i >= p else user_before[-1])

    planned: dict[int, tuple[int, int, int | None, Message | None, int]] = {}

    def plan(b: int) -> tuple[int, int, int | None, Message | None, int]:
        """A cut at unit b: dropped messages and tokens, carried user, marker, kept tokens."""
        if b not in planned:
            planned[b] = _plan(b)
        return planned[b]

    def _plan(b: int) -> tuple[int, int, int | None, Message | None, int]:
        k = starts[b]
        # Some chat templates need a user message first, and the latest one must never go.
        carried = user_before[k] if not dialect.is_user(messages[k]) else None
        carried_tokens = counts[carried] if carried is not None else 0
        n_dropped = k - p - (carried is not None)
        t_dropped = sums[b] - carried_tokens
        tokens = pinned_tokens + carried_tokens + history_tokens - sums[b]
        marker = None
        if n_dropped:
            ref = span_ref(p, k) if span_ref is not None else None
            text = omitted_marker_text(n_dropped, t_dropped, ref)
            marker = dialect.marker(policy.marker_role, text)
            tokens += count(marker)
        return n_dropped, t_dropped, carried, marker, tokens

    def assemble(k: int, carried: int | None, marker: Message | None) -> list[Message]:
        extra = [marker] if marker is not None else []
        extra += [messages[carried]] if carried is not None else []
        return [*messages[:p], *extra, *messages[k:]]

    weighed: dict[tuple[int, bool], tuple[int, Message | None, str]] = {}

    def weigh(b: int, noted: bool) -> tuple[int, Message | None, str]:
        """Tokens a cut at unit b keeps of the whole request, with its marker and its note."""
        noted = noted and note is not None
        if (b, noted) not in weighed:
            _, _, _, marker, tokens = plan(b)
            text = note(starts[b]) if noted and note is not None and marker is not None else ""
            if text and marker is not None:
                noted_marker = {**marker, "content": f"{marker['content']}\n{text}"}
                tokens += count(noted_marker) - count(marker)
                marker = noted_marker
            weighed[b, noted] = tokens, marker, text
        return weighed[b, noted]

    step = max(1, int(policy.trim_step * (budget if grid_budget is None else grid_budget)))
    limit = len(messages) - max(policy.keep_last, 0)
    # The replayed cut fits by construction; the grid is the fallback (e.g. when the newest
    # messages alone outgrow the budget).
    if chain is None and memo is not None and key_of is not None:
        chain = keys.prefixes(messages, key_of)
    # A replay also depends on everything `seed` names: its repr (a tuple of names, numbers and
    # the frozen Policy) is digested once.
    seed_key = keys.digest(b"replay", repr(seed).encode())
    resume = (0, 0)
    if chain is not None and memo is not None:
        resume = _resume(chain, seed_key, memo, starts, p)
    cut_unit = _replay_cut(
        len(messages), prefix, p, starts, budget, policy, weigh, note is not None, resume
    )
    floor_key = keys.digest(b"floor", repr(floor_seed).encode())
    floor_chain = chain if floor_chain is None else floor_chain
    floor = None
    if floor_chain is not None and memo is not None:
        floor = _floor(floor_chain, floor_key, memo, p)
    if floor is not None:
        n, k = floor
        b = next((b for b, s in enumerate(starts) if s == k), None)
        if b is not None and k < n <= len(messages) and (n, b) != resume:
            # Where an earlier turn was cut, whatever its budget: the replay goes on from there
            # (that turn's own prefix weighed again, at this budget), so the cut moves only when
            # this budget no longer fits it, and only forward. (At an unchanged budget that is
            # exactly where the replay itself would resume.)
            resumed = (n - 1, b)
            cut_unit = _replay_cut(
                len(messages), prefix, p, starts, budget, policy, weigh, note is not None, resumed
            )
    if chain is not None and memo is not None and resume[0] < len(messages):
        memo[("replay", seed_key, chain[-1])] = starts[cut_unit] if cut_unit else 0
    replayed = cut_unit or None
    within, beyond = _candidates(starts, sums, step, limit) if replayed is None else ([], [])
    built = replayed is None

    def cuts(newest: bool) -> Iterator[int]:
        """The replayed cut, then the grid's within `limit` (built only when the replayed cut
        does not fit); or (newest) the cuts that drop some of the newest messages."""
        nonlocal within, beyond, built
        if replayed is not None and not newest:
            yield replayed
        if not built:
            within, beyond = _candidates(starts, sums, step, limit)
            built = True
        yield from beyond if newest else within

    def first_fit(newest: bool) -> TrimResult | None:
        for noted in (True, False) if note is not None else (False,):
            for b in cuts(newest):
                n_dropped, t_dropped, carried, marker, tokens = plan(b)
                if tokens > budget:
                    continue  # a note only adds: no need to make one
                tokens, marker, text = weigh(b, noted)
                if tokens > budget:
                    continue
                out = assemble(starts[b], carried, marker)
                return TrimResult(
                    out, n_dropped, t_dropped, starts[b], carried, True, total, tokens, note=text
                )
        return None

    def shrunk_at(b: int, cut_user: bool = False) -> TrimResult:
        """Stage 3 at unit b: cut there unless the marker would cost more than what it
        replaces (then nothing is dropped), and shrink the largest texts kept (`cut_user`: the
        latest user message's too)."""
        n_dropped, t_dropped, carried, marker, cut = 0, 0, None, None, p
        if b > 0 and plan(b)[4] < total:
            n_dropped, t_dropped, carried, marker, _ = plan(b)
            cut = starts[b]
        out = assemble(cut, carried, marker)
        origin = list(range(p)) + ([-1] if marker else [])
        origin += ([carried] if carried is not None else []) + list(range(cut, len(messages)))
        # Pinned system/developer messages are never altered, nor is the latest user message
        # unless it alone cannot fit (`policy.cut_latest_user`; else the caller refuses: 400).
        user = None if cut_user else latest_user
        protect = {i for i, o in enumerate(origin) if o == user or o == -1 or 0 <= o < p}
        counter = count_text or (lambda text: count({"role": "user", "content": text}))
        out, changes, fits, cut_refs = last_resort(
            out,
            budget,
            count,
            counter,
            protect=protect,
            dialect=dialect,
            ref_of=text_ref if span_ref is not None else None,
        )
        shrunk = tuple(Shrunk(origin[i], before, after) for i, before, after in changes)
        tokens = sum(count(m) for m in out)
        user_cut = latest_user if any(s.index == latest_user for s in shrunk) else None
        return TrimResult(
            out,
            n_dropped,
            t_dropped,
            cut,
            carried,
            fits,
            total,
            tokens,
            shrunk,
            user_cut=user_cut,
            refs=cut_refs,
        )

    def chosen() -> TrimResult:
        found = first_fit(newest=False)
        if found is not None:
            return found
        # The newest `keep_last` messages alone do not fit (with what must come with them): they
        # stay, and the largest texts kept are cut head+tail, the deepest cut within `limit` having
        # dropped all the older history it may. Only when even that cannot fit does a cut drop
        # some of them, and then the last resort cuts at the last unit.
        last = len(units) - 1
        deepest = max((b for b in within if b), default=0)
        if deepest < last:
            kept = shrunk_at(deepest)
            if kept.fits:
                return kept
        found = first_fit(newest=True)
        if found is not None:
            return found
        newest = shrunk_at(last)
        if newest.fits or not policy.cut_latest_user or latest_user is None:
            return newest
        # The newest turn does not fit even with every other text cut: the latest user message
        # itself (`cat big.log | llm "summarise"`) is too large. Its middle goes too, with the same
        # marker, which tells the model; the edge tells the client (x-shrink-warning).
        return shrunk_at(last, cut_user=True)

    result = chosen()
    # Only a replayed cut is a floor: a fallback's (the grid, stage 3) is not where the replay
    # of this prefix arrived, and resuming from it would make the plan depend on the history.
    replayed_used = cut_unit > 0 and result.cut == starts[cut_unit] and not result.shrunk
    if floor_chain is not None and memo is not None and replayed_used and result.fits:
        memo[("floor", floor_key, floor_chain[-1])] = result.cut
    return result
