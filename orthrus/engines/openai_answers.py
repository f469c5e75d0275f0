"""A server's answer read and checked before anything is written (issue 62): the audit's verdicts are
only as good as what it accepts, and a wrong answer recorded as a right one becomes a false finding
against someone's server. Three dialects:

  - OpenAI `/v1/completions`, llama.cpp's server: `choices[0].logprobs.content[i]`, each with its `id`,
    its own `logprob` and its `top_logprobs` ([{id, logprob}, ...]);
  - OpenAI `/v1/completions`, vLLM's (`return_tokens_as_token_ids`): `logprobs.tokens[i]` = "token_id:N",
    `logprobs.token_logprobs[i]`, `logprobs.top_logprobs[i]` ({"token_id:N": logprob, ...});
  - llama.cpp's own `/completion`: `tokens` (every id, return_tokens) and `completion_probabilities`,
    whose entries are a subsequence of the tokens (the server drops the entry of a token that ends
    inside a UTF-8 character; orthrus.engines.llamacpp.align_probs matches them back).

Checked, each failure one line naming the server, the request (prompt id, position) and the field
(`BadAnswer`): exactly one choice with index 0; every id an integer (not 12.0, not "token_id:abc") of
the vocabulary; the ids' and log-probability lists aligned, one entry per token; every log-probability a
finite number at most LOGPROB_TOLERANCE (a probability of 1 printed with rounding; above that, a
probability over 1); the chosen token's own log-probability equal to its entry in the top list where it
is listed, and no higher than the lowest listed where it is not (else the list is not a top list);
`usage.completion_tokens` no fewer than the ids; no more tokens than the request's budget.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from orthrus.engines.server import ServerError

TOP = 2
LOGPROB_TOLERANCE = 1e-3  # nats: a server's rounding of log 1 or of one number printed twice
VLLM_ID = "token_id:"  # vLLM's token strings under return_tokens_as_token_ids


class BadAnswer(ServerError):
    """An answer the audit cannot record: names the server, the request, the position and the field."""


@dataclass(frozen=True)
class Asked:
    """One request, as its answer is read: the server, the request's name in messages ("prompt p3
    (repeat 2)"), the vocabulary's size (None: not known, ids only >= 0) and the token budget."""

    server: str
    label: str
    vocab: int | None
    budget: int

    def bad(self, field: str, problem: str, position: int | None = None) -> BadAnswer:
        at = "" if position is None else f", position {position}"
        return BadAnswer(f"the server at {self.server}, {self.label}{at}: field {field}: {problem}")


@dataclass
class Choice:
    """What an answer gives: the generated ids (None: it names none), each position's top-2 [[id,
    logprob], ...] in rank order ([] where it lists none; None: no lists, or lists that cannot be
    matched to the tokens), whether every generated token's id is there, the draft tokens the server
    says it accepted (llama.cpp's `timings`; None where it does not count them), its fingerprint."""

    ids: list[int] | None
    tops: list[list] | None = None
    complete: bool = True
    accepted: int | None = None
    fingerprint: str = ""


def token_id(asked: Asked, value, field: str, position: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise asked.bad(field, f"{_show(value)} is not an integer token id", position)
    if value < 0 or (asked.vocab is not None and value >= asked.vocab):
        bound = f"0..{asked.vocab - 1}" if asked.vocab is not None else ">= 0"
        raise asked.bad(field, f"{value} is outside the vocabulary ({bound})", position)
    return value


def logprob(asked: Asked, value, field: str, position: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise asked.bad(field, f"{_show(value)} is not a finite log-probability", position)
    if value > LOGPROB_TOLERANCE:
        raise asked.bad(
            field, f"{value!r} is above 0 (a probability over 1; tolerance {LOGPROB_TOLERANCE:g})", position
        )
    return float(value)


def ranked(asked: Asked, pairs: list, chosen: int, own: float | None, field: str, position: int) -> list[list]:
    """The top-2 of a position's listed [id, logprob] pairs, in rank order, checked against the chosen
    token's own log-probability `own` where the server gives it."""
    if len({t for t, _ in pairs}) != len(pairs):
        raise asked.bad(field, f"lists a token twice: {pairs!r}", position)
    order = sorted(pairs, key=lambda x: -x[1])
    listed = [lp for t, lp in order if t == chosen]
    if own is not None and listed and abs(listed[0] - own) > LOGPROB_TOLERANCE:
        raise asked.bad(
            field, f"the chosen token {chosen}'s log-probability is {own!r}, its entry here {listed[0]!r}", position
        )
    if own is not None and order and not listed and own > order[-1][1] + LOGPROB_TOLERANCE:
        raise asked.bad(
            field, f"the chosen token {chosen} (log-probability {own!r}) outranks a listed one: {order!r}", position
        )
    return [list(x) for x in order[:TOP]]


def _entry(asked: Asked, c, field: str, i: int, own_key: str = "logprob") -> tuple[int, float | None, list]:
    """One llama.cpp entry {id, logprob, top_logprobs: [{id, logprob}, ...]}: (id, own logprob, top-2)."""
    if not isinstance(c, dict):
        raise asked.bad(field, f"{c!r} is not an object", i)
    t = token_id(asked, c.get("id"), f"{field}.id", i)
    own = logprob(asked, c[own_key], f"{field}.{own_key}", i) if own_key in c else None
    top = c.get("top_logprobs") or []
    if not isinstance(top, list):
        raise asked.bad(f"{field}.top_logprobs", f"{top!r} is not a list", i)
    pairs = []
    for k, x in enumerate(top):
        f = f"{field}.top_logprobs[{k}]"
        if not isinstance(x, dict):
            raise asked.bad(f, f"{x!r} is not an object", i)
        pairs.append((token_id(asked, x.get("id"), f"{f}.id", i), logprob(asked, x.get("logprob"), f"{f}.logprob", i)))
    return t, own, ranked(asked, pairs, t, own, f"{field}.top_logprobs", i)


def _llama_content(asked: Asked, content) -> tuple[list[int] | None, list[list] | None]:
    field = "choices[0].logprobs.content"
    if not isinstance(content, list):
        raise asked.bad(field, f"{content!r} is not a list")
    if not all(isinstance(c, dict) and "id" in c for c in content):
        return None, None  # text and log-probabilities without ids: not the dialect (the probe says so)
    read = [_entry(asked, c, f"{field}[{i}]", i) for i, c in enumerate(content)]
    return [t for t, _, _ in read], [top for _, _, top in read]


def _vllm_id(asked: Asked, token, field: str, i: int) -> int:
    digits = token[len(VLLM_ID) :] if isinstance(token, str) and token.startswith(VLLM_ID) else None
    if digits is None or not digits.isdigit() or not digits.isascii():
        raise asked.bad(field, f"{token!r} is not {VLLM_ID}N with N an integer token id", i)
    return token_id(asked, int(digits), field, i)


def _vllm(asked: Asked, lp: dict) -> tuple[list[int] | None, list[list] | None]:
    field, tokens = "choices[0].logprobs", lp["tokens"]
    if not isinstance(tokens, list):
        raise asked.bad(f"{field}.tokens", f"{tokens!r} is not a list")
    if tokens and not any(isinstance(t, str) and t.startswith(VLLM_ID) for t in tokens):
        return None, None  # token strings, not ids: return_tokens_as_token_ids not honoured (the probe says so)
    ids = [_vllm_id(asked, t, f"{field}.tokens[{i}]", i) for i, t in enumerate(tokens)]
    own = lp.get("token_logprobs")
    if own is not None and (not isinstance(own, list) or len(own) != len(ids)):
        raise asked.bad(f"{field}.token_logprobs", f"{_size(own)} entries for {len(ids)} tokens")
    own = [logprob(asked, v, f"{field}.token_logprobs[{i}]", i) for i, v in enumerate(own)] if own else None
    tops = lp.get("top_logprobs")
    if tops is None:
        return ids, None
    if not isinstance(tops, list) or len(tops) != len(ids):
        raise asked.bad(f"{field}.top_logprobs", f"{_size(tops)} entries for {len(ids)} tokens")
    out = []
    for i, pos in enumerate(tops):
        f = f"{field}.top_logprobs[{i}]"
        if not isinstance(pos, dict):
            raise asked.bad(f, f"{pos!r} is not an object", i)
        pairs = [(_vllm_id(asked, t, f, i), logprob(asked, v, f"{f}[{t!r}]", i)) for t, v in pos.items()]
        out.append(ranked(asked, pairs, ids[i], own[i] if own else None, f, i))
    return ids, out


def _show(value) -> str:
    """A value as the answer wrote it (null, 12.0, "12"), cut short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _size(value) -> str:
    return str(len(value)) if isinstance(value, list) else type(value).__name__


def _counts(asked: Asked, answer: dict, ids: list[int]) -> tuple[bool, int | None]:
    """(every generated id given, the accepted drafts), from `usage` and llama.cpp's `timings`."""
    if len(ids) > asked.budget:
        raise asked.bad("tokens", f"{len(ids)} tokens, over the request's budget of {asked.budget}")
    usage = answer.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < len(ids)):
        raise asked.bad("usage.completion_tokens", f"{n!r}, not a count of at least the {len(ids)} ids given")
    timings = answer.get("timings")
    accepted = timings.get("draft_n_accepted") if isinstance(timings, dict) else None
    if accepted is not None and (isinstance(accepted, bool) or not isinstance(accepted, int) or accepted < 0):
        raise asked.bad("timings.draft_n_accepted", f"{accepted!r} is not a count")
    return n is None or n == len(ids), accepted


def read_openai(answer: dict, asked: Asked) -> Choice:
    """An OpenAI `/v1/completions` answer, either dialect."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or len(choices) != 1:
        raise asked.bad("choices", f"{_size(choices)} choices, not exactly one (one prompt a request)")
    c = choices[0]
    if not isinstance(c, dict):
        raise asked.bad("choices[0]", f"{c!r} is not an object")
    if "index" in c and (isinstance(c["index"], bool) or c["index"] != 0):
        raise asked.bad("choices[0].index", f"{c['index']!r}, not 0 (the request's one prompt)")
    fingerprint = str(answer.get("system_fingerprint") or "")
    lp = c.get("logprobs")
    if lp is not None and not isinstance(lp, dict):
        raise asked.bad("choices[0].logprobs", f"{lp!r} is not an object")
    ids, tops = None, None
    if lp and "content" in lp:
        ids, tops = _llama_content(asked, lp["content"])
    elif lp and "tokens" in lp:
        ids, tops = _vllm(asked, lp)
    if ids is None:
        return Choice(None, fingerprint=fingerprint)
    complete, accepted = _counts(asked, answer, ids)
    return Choice(ids, tops, complete, accepted, fingerprint)


def read_native(answer: dict, asked: Asked) -> Choice:
    """A llama.cpp `/completion` answer: every id in `tokens`, the probabilities matched back to them."""
    from orthrus.engines.llamacpp import align_probs

    tokens = answer.get("tokens")
    if tokens is None:
        return Choice(None)
    if not isinstance(tokens, list):
        raise asked.bad("tokens", f"{tokens!r} is not a list")
    ids = [token_id(asked, t, f"tokens[{i}]", i) for i, t in enumerate(tokens)]
    probs = answer.get("completion_probabilities")
    tops = None
    if probs is not None:
        if not isinstance(probs, list) or len(probs) > len(ids):
            raise asked.bad("completion_probabilities", f"{_size(probs)} entries for {len(ids)} tokens")
        checked = []
        for i, c in enumerate(probs):  # checked where they stand (entry i); matched to their tokens below
            t, _, top = _entry(asked, c, f"completion_probabilities[{i}]", i)
            checked.append({"id": t, "top_logprobs": [{"id": a, "logprob": b} for a, b in top]})
        tops, aligned = align_probs(ids, checked)
        tops = tops if aligned else None
    complete, accepted = _counts(asked, {"timings": answer.get("timings")}, ids)
    return Choice(ids, tops, complete, accepted, str(answer.get("system_fingerprint") or ""))
