"""The pure shrink pipeline: messages in, messages plus a report out. No I/O, no settings.

  stage 1 `tools`  every oversized tool result is compacted, content-aware and position-free
                   (the same output is cut the same way every turn: prefix caches survive);
  stage 2 `trim`   when still over budget, the oldest history is dropped at a sticky cut;
  stage 3          when even the newest turn does not fit, its largest texts are cut head+tail.

Stages are picked by mode from a registry (`off` is the null object). The caller passes a token
counter and an optional memo for stage 1; neither changes results, only their cost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.pipeline import keys, refs
from proxy.pipeline.budget import Budget, compute_budget
from proxy.pipeline.compact import Compacted, compact_text
from proxy.pipeline.counter import CallCounter
from proxy.pipeline.dialect import CHAT, Dialect
from proxy.pipeline.last_resort import shrink_text_head_tail
from proxy.pipeline.notes import Notes
from proxy.pipeline.trim import trim_history
from proxy.pipeline.types import Counter, Message, Mode, Policy, Report, StageAction
from proxy.pipeline.units import pinned_count
from proxy.pipeline.work import Budgeter, WorkExceeded

__all__ = [
    "CHAT",
    "Budget",
    "CallCounter",
    "Dialect",
    "Plan",
    "Policy",
    "Report",
    "compact_key",
    "compute_budget",
    "shrink",
    "tool_texts",
]

REPLY_PRIMING = 3
# Stage-1 results by ("tool", encoding, text key, limit); by the key of a conversation's prefix
# (keys.prefixes: a chain of the messages' count keys, one per request), the facts read of the
# dropped spans ("facts-state") and their lists ("facts-text", with the encoding and room)
# (proxy.pipeline.notes), and where stage 2's replays ended ("replay", with the key of what
# else they depend on). Every key is a digest of the content it names (proxy.pipeline.keys).
CompactMemo = MutableMapping[Hashable, Any]


@dataclass
class Plan:
    messages: list[Message]
    report: Report
    changed: bool
    # What stage 2 cut away (in order; a carried user message included), as the client sent it
    # (before stage 1), and where its marker sits in `messages`: the edge may replace that
    # marker with a summary of the span (compact mode).
    span: list[Message] = field(default_factory=list)
    marker_index: int | None = None
    # The originals behind the refs the shrunk messages name (policy.retrieve), in the order
    # met: a tool text as sent, or a dropped span's messages as sent (the edge renders them).
    refs: dict[str, str | list[Message]] = field(default_factory=dict)
    span_ref: str | None = None  # the ref of `span`, which a summary replacing the marker names
    # Whether the edge adds the format's retrieval tool to the request (proxy.shrinker), and
    # what it costs (counted in report.tokens_after).
    retrieval_tool: bool = False
    tool_tokens: int = 0


@dataclass
class _Context:
    budget: Budget
    counter: CallCounter
    policy: Policy
    fixed: int
    memo: CompactMemo | None
    report: Report
    room: int  # tokens stage 2 may fill with messages (and in trim mode the facts note)
    grid_room: int  # tokens the sticky grid's step is a share of
    facts_tokens: int  # room for the dropped span's key lines under the marker
    # True: the facts are part of each cut's marker as stage 2 weighs it; False (compact mode):
    # a fixed room is reserved for the summary, and the facts are listed after the cut.
    facts_in_cut: bool
    span: list[Message] = field(default_factory=list)
    marker_index: int | None = None
    work: Budgeter | None = None  # a budget per stage-1 text (proxy.pipeline.work)
    # keys.prefixes of the messages as sent (stage 1 leaves their number and order alone)
    floor_chain: list[bytes] | None = None
    dialect: Dialect = CHAT
    sent: list[Message] = field(default_factory=list)  # the messages as sent
    refs: dict[str, str | list[Message]] = field(default_factory=dict)
    span_ref: str | None = None


def shrink(
    messages: list[Message],
    *,
    budget: Budget,
    counter: Counter | CallCounter,
    policy: Policy,
    mode: Mode | None = None,
    fixed_tokens: int = 0,
    memo: CompactMemo | None = None,
    work: Budgeter | None = None,
    dialect: Dialect = CHAT,
) -> Plan:
    """Shrink `messages` so that they plus `fixed_tokens` (tool definitions, and instructions
    held outside the messages) fit `budget.prompt`. `work`: a budget for each tool result stage
    1 reads (proxy.pipeline.work). `dialect`: the wire format of the messages; `counter` must
    count that format's messages."""
    mode = mode or policy.mode
    counter = counter if isinstance(counter, CallCounter) else CallCounter(counter)
    report = Report(budget=budget.prompt, window=budget.window, estimate=not counter.exact)
    if budget.clamped:
        report.notes.append(
            f"completion reserve {budget.reserve:,} leaves too little room; "
            f"prompt budget clamped to {budget.prompt:,}"
        )
    room = budget.prompt - fixed_tokens - REPLY_PRIMING
    facts_tokens = facts_room(policy, budget.window)
    if mode == "compact":
        # Leave room for the summary that replaces the marker (and its facts) on the way out.
        room -= max(facts_tokens, policy.summary_tokens)
        ctx = _Context(
            budget, counter, policy, fixed_tokens, memo, report, room, room, facts_tokens, False
        )
        ctx.work = work
    else:
        # The facts under the marker cost what they take: each cut is weighed with its own list
        # (stage 2's note), and the grid is a share of the whole room, so listing facts does not
        # move the candidate cuts; it only makes a cut too big a little sooner.
        ctx = _Context(
            budget, counter, policy, fixed_tokens, memo, report, room, room, facts_tokens, True
        )
        ctx.work = work
    ctx.dialect = dialect
    ctx.sent = messages
    if memo is not None:
        ctx.floor_chain = keys.prefixes(messages, counter.key_of)
    out = list(messages)
    for stage in STAGES[mode]:
        if stage is _trim and _total(out, counter, fixed_tokens) <= budget.prompt:
            break  # fits after stage 1: no trim, and no facts to list for it
        out = stage(out, ctx)
    # Totalled after stage 1, which counts the long tool results itself: while it reads one,
    # the edge may be counting the next (proxy.ahead); a total first would wait for them all.
    before = report.tokens_before = _total(messages, counter, fixed_tokens)
    after = _total(out, counter, fixed_tokens)
    changed = any(a is not b for a, b in zip(out, messages, strict=False)) or len(out) != len(
        messages
    )
    if changed and after >= before:
        # Never make a request larger: a marker can outweigh what it replaced.
        report.notes.append("shrinking did not reduce the request; sent unchanged")
        report.actions.clear()
        report.details.clear()
        out, after, changed = list(messages), before, False
    report.tokens_after = after
    report.fits = after <= budget.prompt
    if not changed:
        return Plan(messages=messages, report=report, changed=False)
    return Plan(
        out,
        report,
        True,
        span=_as_sent(ctx, messages),
        marker_index=ctx.marker_index,
        refs=ctx.refs,
        span_ref=ctx.span_ref,
    )


def _as_sent(ctx: _Context, messages: list[Message]) -> list[Message]:
    """The dropped span as the client sent it. Stage 1 compacts in place (index for index), and
    how much depends on the window, which calibration moves from turn to turn: a summary keyed
    by the compacted span would be asked for again whenever it moved."""
    if not ctx.span or ctx.marker_index is None:
        return ctx.span
    start = ctx.marker_index
    original = messages[start : start + len(ctx.span)]
    return original if len(original) == len(ctx.span) else ctx.span


def _total(messages: list[Message], counter: CallCounter, fixed: int) -> int:
    return counter.total(messages) + fixed + REPLY_PRIMING


class _Stage1Edit:
    """Stage 1 of each text of one tool result, with the tokens before and after summed."""

    def __init__(self, limit: int, ctx: _Context) -> None:
        self.limit, self.ctx = limit, ctx
        self.before = self.after = 0
        self.cut: list[bool] = []  # a text whose rules spent their work budget (head+tail)

    def __call__(self, text: str) -> str | None:
        ctx = self.ctx
        retrieve = ctx.policy.retrieve
        done = _compact(text, self.limit, ctx.counter, ctx.memo, ctx.work, self.cut, retrieve)
        if done is None:
            return None
        if retrieve and done.ref:
            ctx.refs[done.ref] = text
        self.before += done.tokens_before
        self.after += done.tokens_after
        return done.text


def _tools(messages: list[Message], ctx: _Context) -> list[Message]:
    """Stage 1: compact each oversized tool result alone, whatever the budget or position."""
    report, dialect = ctx.report, ctx.dialect
    limit = ctx.policy.tool_limit(ctx.budget.window)
    out = messages
    for i, m in enumerate(messages):
        if not dialect.is_result(m):
            continue
        edit = _Stage1Edit(limit, ctx)
        new = dialect.edit_results(m, edit)
        if new is None:
            continue
        if out is messages:
            out = list(messages)
        out[i] = new
        report.count("tools")
        detail = "tool result compacted"
        if edit.cut:
            report.count("work_budget", len(edit.cut))
            detail = "tool result cut head+tail: its rules spent their work budget"
        report.details.append(StageAction("tools", i, detail, edit.before, edit.after))
    return out


def tool_texts(messages: list[Message], limit: int, dialect: Dialect = CHAT) -> list[str]:
    """The tool-result texts stage 1 counts (those past the byte bound), in the order it meets
    them: what the edge may count ahead on another core."""
    return [
        text
        for m in messages
        if dialect.is_result(m)
        for text in dialect.result_texts(m)
        if len(text) > limit
    ]


def compact_key(text: str, limit: int, counter: CallCounter, retrieve: bool = False) -> Hashable:
    """The stage-1 memo's key for a tool text (the edge looks it up to tell warm from cold)."""
    return ("tool", counter.name, counter.text_key(text), limit, retrieve)


def _compact(
    text: str,
    limit: int,
    counter: CallCounter,
    memo: CompactMemo | None,
    work: Budgeter | None = None,
    cut: list[bool] | None = None,
    retrieve: bool = False,
) -> Compacted | None:
    """Stage 1 of one text, memoized; `work` gives it a budget (`proxy.pipeline.work`): spent,
    the text is cut head+tail instead (remembered too, so the next turn cuts it alike), and
    `cut` is told. `retrieve`: the result ends with the ref of the whole text (its footer
    fitted within `limit`)."""
    # Tokens never exceed UTF-8 bytes, so a short text needs no count at all.
    if len(text) <= limit and len(text.encode()) <= limit:
        return None
    key = compact_key(text, limit, counter, retrieve) if memo is not None else None
    if memo is not None:
        try:
            done: Compacted | None = memo[key]
        except KeyError:
            pass
        else:
            if done is not None and done.kind == "cut" and cut is not None:
                cut.append(True)
            return done
    ref = None
    room = limit
    if retrieve:
        ref = refs.text_ref(text)
        lines = text.count("\n") + 1
        # What names the ref costs room: inside the last note of a JSON text (see below), else
        # a footer line.
        note = refs.json_note(ref) if text[:64].lstrip()[:1] in ("[", "{") else None
        room = max(1, limit - counter.count_text(note or refs.footer(ref, lines)) - 1)
    try:
        done = compact_text(text, room, counter.count_text, work(len(text)) if work else None)
    except WorkExceeded:
        before = counter.count_text(text)
        out = shrink_text_head_tail(text, room, counter.count_text)
        done = Compacted(out, "cut", before, counter.count_text(out), 0)
        if cut is not None:
            cut.append(True)
    if done is not None and ref is not None:
        if done.tokens_before <= limit:
            done = None  # it fits as it is: the room was only for the footer
        else:
            # JSON stays JSON: the ref goes inside its last note (shorter than the footer).
            inside = refs.in_json(done.text, ref) if done.kind == "json" else None
            named = inside or f"{done.text}\n{refs.footer(ref, lines)}"
            done = dataclasses.replace(
                done, text=named, tokens_after=counter.count_text(named), ref=ref
            )
    if memo is not None:
        memo[key] = done
    return done


def _trim(messages: list[Message], ctx: _Context) -> list[Message]:
    """Stages 2 and 3: drop old history at a sticky cut; last resort, cut the newest turn."""
    counter, report = ctx.counter, ctx.report
    chain = keys.prefixes(messages, counter.key_of) if ctx.memo is not None else None
    notes = None
    if ctx.facts_in_cut and ctx.facts_tokens > 0:
        notes = _notes(messages, pinned_count(messages, ctx.dialect), ctx, chain)
    note = notes.text if notes is not None else None
    result = trim_history(
        messages,
        ctx.room,
        counter.count_message,
        ctx.policy,
        count_text=counter.count_text,
        note=note,
        grid_budget=ctx.grid_room,
        key_of=counter.key_of,
        memo=ctx.memo,
        # Everything a replay depends on besides the messages themselves.
        seed=(counter.name, ctx.room, ctx.policy, note is not None, ctx.facts_tokens),
        # ... and what the cut an earlier turn was sent with depends on, its budget aside.
        floor_seed=(counter.name, ctx.policy, ctx.facts_in_cut),
        chain=chain,
        floor_chain=ctx.floor_chain,
        dialect=ctx.dialect,
        span_ref=_span_refs(ctx) if ctx.policy.retrieve else None,
    )
    if notes is not None:
        notes.save()
    if result is None:
        return messages
    ctx.refs.update(result.refs)  # stage 3's cuts (retrieval on)
    if result.dropped_messages and ctx.policy.retrieve:
        p = pinned_count(messages, ctx.dialect)
        ref = _span_refs(ctx)(p, result.cut)
        ctx.refs[ref] = ctx.sent[p : result.cut]
        ctx.span_ref = ref
    if result.note:
        report.count("facts", result.note.count("\n- "))
    if result.dropped_messages and not result.shrunk:
        p = pinned_count(messages, ctx.dialect)
        ctx.marker_index = p
        # The carried user message stays in the span: then a later, deeper cut's span extends
        # this one, and its summary can be updated incrementally instead of redone.
        ctx.span = messages[p : result.cut]
    if result.dropped_messages:
        report.count("trim", result.dropped_messages)
        report.details.append(
            StageAction(
                "trim",
                result.cut,
                f"{result.dropped_messages} earlier messages omitted"
                + (
                    f"; user message {result.carried_user} carried"
                    if result.carried_user is not None
                    else ""
                ),
                result.dropped_tokens,
                0,
            )
        )
    for s in result.shrunk:
        report.count("truncate")
        detail = "cut head+tail (last resort)"
        if s.index == result.user_cut:
            detail = "latest user message cut head+tail: it alone does not fit the budget"
        report.details.append(
            StageAction("truncate", s.index, detail, s.tokens_before, s.tokens_after)
        )
    if result.user_cut is not None:
        report.count("user_cut")
        report.notes.append("the latest user message alone did not fit: its middle was cut")
    return result.messages


def _span_refs(ctx: _Context) -> Callable[[int, int], str]:
    """The ref of the sent messages [start:end], from the chain of their keys (built here when
    the memo did not need one, or by a message's JSON when the counter keys none)."""
    chain = ctx.floor_chain
    if chain is None:
        chain = keys.prefixes(ctx.sent, ctx.counter.key_of) or keys.prefixes(ctx.sent, _json_key)
        ctx.floor_chain = chain
    assert chain is not None
    return lambda start, end: refs.span_ref(chain, start, end)


def _json_key(message: Message) -> bytes:
    return keys.digest(b"msg", orjson.dumps(message, option=orjson.OPT_SORT_KEYS))


def facts_room(policy: Policy, window: int) -> int:
    """Tokens the facts under the marker may take: `facts_tokens`, and at most a share of the
    window, so on a small window the list does not crowd out the history it stands for; but
    never less than `facts_min_tokens`, a few lines, below which the list says nothing."""
    if policy.facts_window_share <= 0:
        return max(policy.facts_tokens, 0)
    share = max(window // policy.facts_window_share, policy.facts_min_tokens)
    return max(min(policy.facts_tokens, share), 0)


def _notes(
    messages: list[Message], start: int, ctx: _Context, chain: list[bytes] | None = None
) -> Notes:
    """The facts listed under the marker of each cut of messages[start:]."""
    counter = ctx.counter
    return Notes(
        messages,
        start,
        counter.count_text,
        ctx.facts_tokens,
        name=counter.name,
        key_of=counter.key_of,
        memo=ctx.memo,
        chain=chain,
        dialect=ctx.dialect,
    )


def _facts(messages: list[Message], ctx: _Context) -> list[Message]:
    """Compact mode: list the span's key lines under the marker, in the room reserved for the
    summary that will replace them (trim mode lists them in stage 2, with the cut)."""
    i = ctx.marker_index
    if i is None or ctx.facts_in_cut:
        return messages
    notes = _notes(ctx.span, 0, ctx)
    text = notes.text(len(ctx.span))
    notes.save()  # a deeper cut next turn reads only the messages it adds
    if not text:
        return messages
    marker = messages[i]
    out = list(messages)
    out[i] = {**marker, "content": f"{marker['content']}\n{text}"}
    ctx.report.count("facts", text.count("\n- "))
    return out


def _off(messages: list[Message], ctx: _Context) -> list[Message]:
    return messages


Stage = Callable[[list[Message], _Context], list[Message]]
STAGES: dict[str, tuple[Stage, ...]] = {
    "off": (_off,),
    "tools": (_tools,),
    "trim": (_tools, _trim, _facts),
    "auto": (_tools, _trim, _facts),
    "compact": (_tools, _trim, _facts),
}
