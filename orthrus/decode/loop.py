"""AR and Orthrus decoding, batch size 1, as a few small functions: `generate` runs the prefill forward,
then one step function per decoder (`_ar_step`, `_orthrus_step` with `_verify` and `consensus`,
`_oracle_step`) until EOS or the token budget.

Greedy Orthrus emits, at every step, the AR view's argmax after the longest prefix of diffusion
proposals that the AR view agrees with: in exact arithmetic it is the AR trajectory. Whether
that survives finite precision is what this project measures.
"""

from __future__ import annotations

import dataclasses
import numbers
import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from orthrus.contracts import LOOP_DECODERS
from orthrus.decode.tpf import tokens_per_forward
from orthrus.decoders import DECODER, Decoder
from orthrus.models.cache import cache_kwarg
from orthrus.models.loading import eos_ids
from orthrus.options import DecodeOptions, OptionsError


@dataclass
class Sampler:
    """Greedy when `temperature == 0`; otherwise temperature, then top-k, then top-p (as transformers)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float() / self.temperature
        if self.top_k:
            kth = torch.topk(logits, min(self.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p is not None and self.top_p < 1:
            sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            drop = cum - sorted_logits.softmax(-1) >= self.top_p  # keep the smallest set reaching top_p
            logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        return logits.softmax(-1)

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1) if self.greedy else self.sample(self.probs(logits))


@dataclass
class GenerateOutput:
    tokens: torch.Tensor  # generated ids only, 1-D, EOS included when reached
    stats: dict = field(default_factory=dict)


@dataclass
class Forward:
    """One forward of the AR view as the loop ran it, for a `trace` (forensics, stop strings).

    Row i of `logits` (and of each layer's `hidden`, embeddings first, when the trace asked for
    hidden states) predicts generated token `first + i`; the loop emitted the first `emitted` of
    them (a verify pass: the accepted proposals and the correction). `input_ids` is what the
    forward read: its length is the block's shape."""

    kind: str  # "prefill", "verify" (a consensus step) or "ar" (a single-token step)
    first: int
    input_ids: list[int]
    logits: torch.Tensor
    hidden: list[torch.Tensor] | None
    emitted: int


def ar_forward(model, ids: torch.Tensor, cache, last_only: bool = False, hidden: bool = False):
    """One causal forward of the AR view over `ids` (1-D), appending them to `cache`: its logits,
    and (`hidden`) the hidden state after every layer.

    `last_only` computes the LM head for the last position only; the released loop computes
    it at every prompt position, which can change the bits of the last row on some kernels."""
    out = model(
        input_ids=ids[None],
        **cache_kwarg(model, cache),
        use_cache=True,
        logits_to_keep=1 if last_only else 0,
        output_hidden_states=hidden,
    )
    return out.logits[0], ([h[0] for h in out.hidden_states] if hidden else None)


def diffusion_proposals(model, x: torch.Tensor, cache, block_size: int) -> torch.Tensor:
    """Logits of the diffusion view for the block [x, M, ..., M] (`block_size` tokens) right after
    the cache; slots 0..block_size-2."""
    start = cache.get_seq_length()
    block = torch.full((1, block_size), model.mask_token_id, dtype=torch.long, device=x.device)
    block[0, 0] = x
    positions = torch.arange(start, start + block_size, device=x.device)[None]
    return model.diffusion_forward(block, positions, cache)[0, :-1]


def consensus(
    draft: torch.Tensor,
    draft_logits: torch.Tensor | None,
    verify_logits: torch.Tensor,
    sampler: Sampler,
    accept_top: int = 1,
    ratio_temperature: float | None = None,
):
    """Accepted draft length n and the next token (AR correction or bonus) for one step.

    `verify_logits[i]` is the AR view's prediction for the token after draft position i-1
    (row 0 follows the anchor), so there is one more verify row than draft tokens. Greedy
    accepts a draft token that is the AR view's argmax; `accept_top` 2 (the planted bug of the
    `orthrus-lossy` control) accepts one among its top 2.
    Sampled, `ratio_temperature` (the planted bug of the sampled `orthrus-lossy` control) computes
    q for the acceptance ratio and the residual at that temperature, while the draft was drawn
    at the sampler's: the output is then no longer distributed as p.
    """
    if sampler.greedy:
        target = verify_logits.argmax(-1)
        top = torch.topk(verify_logits[:-1], accept_top, dim=-1).indices if accept_top > 1 else target[:-1, None]
        n = int((draft[:, None] == top).any(-1).long().cumprod(0).sum())
        return n, target[n]
    p = sampler.probs(verify_logits)
    q = (
        sampler.probs(draft_logits)
        if ratio_temperature is None
        else dataclasses.replace(sampler, temperature=ratio_temperature).probs(draft_logits)
    )
    idx = torch.arange(len(draft), device=draft.device)
    ratio = p[idx, draft] / q[idx, draft]
    u = torch.rand(len(draft), generator=sampler.generator, device=draft.device)
    n = int((u < ratio).long().cumprod(0).sum())
    if n == len(draft):
        return n, sampler.sample(p[n])
    residual = (p[n] - q[n]).clamp_min(0)
    return n, sampler.sample(residual / residual.sum())


@dataclass
class _Run:
    """The state one `generate` call threads through its steps."""

    model: object
    cache: object
    K: int
    sampler: Sampler
    shorten: bool
    stats: dict
    trace: object = None
    hidden: bool = False
    accept_top: int = 1  # the decoder row's (2: the orthrus-lossy control's planted bug)
    ratio_temperature: float | None = None  # the row's, when sampling (1.0: the planted bug sampled)
    oracle: list[int] | None = None  # the oracle control's drafts: the reference trajectory
    guard: float = 0.0  # verify_guard: a verify row with a top-1/top-2 margin below it ends the step
    tokens: list[int] = field(default_factory=list)  # emitted so far (generate's list)
    step_first: int = 0  # generated tokens before the current step
    first: int = 0  # ... before the current forward's first row (a guarded step runs two forwards)
    pending: Forward | None = None  # the last forward, until the trace sees it with its emitted count
    stopped: bool = False  # the trace asked the loop to stop

    def forward(self, kind: str, ids: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        logits, hidden = ar_forward(self.model, ids, self.cache, last_only, self.hidden and self.trace is not None)
        if self.trace is not None:
            rows = slice(-1, None) if kind == "prefill" else slice(None)
            self.pending = Forward(
                kind,
                self.first,
                ids.tolist(),
                logits[rows],
                [h[rows] for h in hidden] if hidden is not None else None,
                0,
            )
        return logits

    def traced(self, emitted: int, tokens: list[int]) -> bool:
        """Hand the last forward to the trace, with the tokens it emitted of the step's `emitted`;
        True when the trace asks the loop to stop."""
        if self.trace is None or self.stopped:
            return self.stopped
        self.pending.emitted = self.step_first + emitted - self.pending.first
        self.stopped = bool(self.trace(self.pending, tokens))
        return self.stopped


def _eos_set(model, opts: DecodeOptions, eos_token_id) -> set[int]:
    """The ids that end the trajectory: an explicit `eos_token_id` (an int or a list of ints), else `opts.eos`'s."""
    if eos_token_id is None:
        return set(eos_ids(model, opts.eos))
    given = [eos_token_id] if not isinstance(eos_token_id, (list, tuple, set)) else list(eos_token_id)
    if not all(isinstance(e, int) and not isinstance(e, bool) for e in given):
        raise OptionsError(f"eos_token_id must be an int or a list of ints, got {eos_token_id!r}")
    return set(given)


# no autograd: a decoding run records no graph (recording one costs every forward time and memory)
@torch.inference_mode()
def generate(
    model,
    input_ids: torch.Tensor,
    options: DecodeOptions | None = None,
    *,
    eos_token_id: int | list[int] | None = None,
    generator: torch.Generator | None = None,
    trace=None,
    hidden_states: bool = False,
    oracle: list[int] | None = None,
    **changes,
) -> GenerateOutput:
    """Decode one prompt as `options` say (a `DecodeOptions`; keyword `changes` replace its
    fields, `decoder` a name or a row of the decoder table): the AR view (`ar`) or the Orthrus
    consensus loop (`orthrus`), greedy unless the options sample (with `generator`); or a control
    of the audit (`orthrus.contracts.CONTROLS`): `orthrus-lossy`, the loop with a planted bug, and
    `oracle`, the consensus loop on a plain causal LM whose drafts are `oracle`, the reference
    trajectory of the prompt (the verify shape without the drafter). The decoder's row says which:
    its step (`_step`) and its acceptance rule (`accept_top`, `ratio_temperature`).

    An explicit `eos_token_id` replaces the ids of `options.eos`. `trace(forward, tokens)`, when
    given, is called after every forward of the AR view with a `Forward` (and, with
    `hidden_states`, its per-layer hidden states) and the tokens emitted so far; it returning
    True ends the loop there (stop strings, a forensics replay that has what it needs). The model
    is used as loaded: `options.precision` and `attention` say how it was (`orthrus.models.loading`)."""
    if isinstance(changes.get("decoder"), Decoder):
        changes["decoder"] = changes["decoder"].name
    opts = (options or DecodeOptions()).replace(**changes)
    if opts.decoder not in LOOP_DECODERS:
        raise OptionsError(f"orthrus.generate runs the decoders {', '.join(LOOP_DECODERS)}, got {opts.decoder!r}")
    ids = _check_args(model, input_ids, opts, oracle)
    decoder = DECODER[opts.decoder]
    step = _step(decoder)
    K = 1 if step is _ar_step else opts.block_size or model.block_size
    eos = _eos_set(model, opts, eos_token_id)
    sampler = Sampler(opts.temperature, opts.top_k, opts.top_p, generator)

    stats = {"decoder": decoder.name, "block_size": K, "n_prefill": 0, "n_diffusion": 0, "n_verify": 0, "accepted": []}
    tokens: list[int] = []
    t0 = time.perf_counter()
    if opts.max_new_tokens > 0:
        run = _Run(
            model,
            DynamicCache(config=model.config),
            K,
            sampler,
            opts.last_block == "shorten",
            stats,
            trace,
            hidden_states,
            accept_top=decoder.accept_top,
            ratio_temperature=None if sampler.greedy else decoder.ratio_temperature,
            oracle=[int(t) for t in oracle] if oracle is not None else None,
            guard=opts.verify_guard,
            tokens=tokens,
        )
        x = sampler.pick(run.forward("prefill", ids, last_only=opts.prefill_logits == "last")[-1])
        stats["n_prefill"] = 1
        tokens.append(int(x))
        stop = run.traced(1, tokens)
        while not stop and len(tokens) < opts.max_new_tokens and tokens[-1] not in eos:
            remaining = opts.max_new_tokens - len(tokens)
            run.step_first = run.first = len(tokens)
            new = step(run, x, remaining)
            x = new[-1]
            for t in new.tolist()[:remaining]:  # a shortened last block may end one past the budget
                tokens.append(t)
                if t in eos:
                    break
            stop = run.traced(len(new), tokens)
    stats["seconds"] = time.perf_counter() - t0
    stats["n_tokens"] = len(tokens)
    stats["finish_reason"] = "eos" if tokens and tokens[-1] in eos else "length"
    stats.update(
        tokens_per_forward(
            len(tokens), stats["n_prefill"], stats["n_diffusion"], stats["n_verify"], stats["accepted"], undefined=0.0
        )
    )
    return GenerateOutput(torch.tensor(tokens, dtype=torch.long), stats)  # host: the ids, read with .tolist()


def _check_args(model, input_ids, opts: DecodeOptions, oracle) -> torch.Tensor:
    """The prompt as 1-D ids on the model's device; an error saying in one line what is wrong
    (the options checked themselves when they were built)."""
    if model is None or not hasattr(model, "config"):
        raise OptionsError(f"model must be a loaded causal LM, got {type(model).__name__}")
    if DECODER[opts.decoder].diffusion and not hasattr(model, "diffusion_forward"):
        raise OptionsError(
            f"decoder {opts.decoder} needs an Orthrus model (OrthrusForCausalLM), got {type(model).__name__}"
        )
    if DECODER[opts.decoder].takes_reference != (oracle is not None):
        raise OptionsError("the oracle decoder takes the reference trajectory (oracle=[token ids]), and only it")
    if oracle is not None and (isinstance(oracle, (str, bytes)) or not all(_is_token(t) for t in oracle)):
        raise OptionsError("oracle must be a list of token ids (the reference trajectory)")
    if DECODER[opts.decoder].takes_reference and not (opts.block_size or hasattr(model, "block_size")):
        raise OptionsError("the oracle decoder needs block_size (the K of the verify blocks it stands in for)")
    if (
        not isinstance(input_ids, torch.Tensor)
        or input_ids.dtype == torch.bool
        or input_ids.is_floating_point()
        or input_ids.is_complex()
    ):
        raise OptionsError(
            f"input_ids must be an integer tensor of token ids, got {getattr(input_ids, 'dtype', type(input_ids))}"
        )
    if not (input_ids.dim() == 1 or (input_ids.dim() == 2 and input_ids.shape[0] == 1)):
        raise OptionsError(f"batch size 1 only; got input_ids of shape {tuple(input_ids.shape)}")
    ids = input_ids.reshape(-1).to(device=model.device, dtype=torch.long)
    if ids.numel() == 0:
        raise OptionsError("empty prompt: at least one token is needed")
    vocab = model.config.vocab_size
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise OptionsError(f"input_ids must lie in [0, {vocab}), got values from {int(ids.min())} to {int(ids.max())}")
    limit = model.config.max_position_embeddings
    if ids.numel() + opts.max_new_tokens > limit:
        raise OptionsError(
            f"prompt ({ids.numel()} tokens) + max_new_tokens ({opts.max_new_tokens}) exceeds the model's {limit} positions"
        )
    return ids


def _is_token(t) -> bool:
    """An integer (Python's, numpy's) or a one-element integer tensor."""
    if isinstance(t, torch.Tensor):
        return t.numel() == 1 and not t.is_floating_point() and t.dtype != torch.bool
    return isinstance(t, numbers.Integral) and not isinstance(t, bool)


def _step(decoder: Decoder):
    """A loop decoder's step, from where its row says its drafts come from: the diffusion view
    (`_orthrus_step`), the reference trajectory (`_oracle_step`), or none (`_ar_step`, a block of 1)."""
    return _orthrus_step if decoder.diffusion else _oracle_step if decoder.takes_reference else _ar_step


def _ar_step(run: _Run, x, remaining) -> torch.Tensor:
    run.stats["n_verify"] += 1
    return run.sampler.pick(run.forward("ar", x.reshape(1))[-1]).reshape(1)


def _orthrus_step(run: _Run, x, remaining) -> torch.Tensor:
    """Propose with the diffusion view, verify with the AR view, keep the agreeing prefix.

    Full blocks: never proposes more than `remaining - 1` tokens, so a step never emits more
    than asked. Shortened blocks (the reference loop): a block of min(K, remaining + 1) tokens
    proposes up to `remaining`; the caller drops what passes the budget.
    """
    if remaining == 1 and not run.shorten:  # nothing left to propose: a plain AR step
        return _ar_step(run, x, remaining)
    if run.shorten:
        draft_logits = diffusion_proposals(run.model, x, run.cache, min(run.K, remaining + 1))
    else:
        draft_logits = diffusion_proposals(run.model, x, run.cache, run.K)[: remaining - 1]
    draft = run.sampler.pick(draft_logits)
    run.stats["n_diffusion"] += 1
    return _verify(run, x, draft, draft_logits)


def _verify(run: _Run, x, draft, draft_logits) -> torch.Tensor:
    """One verify forward over [x, draft]: the accepted proposals and the next token."""
    verify_logits = run.forward("verify", torch.cat([x.reshape(1), draft]))
    n, nxt = consensus(draft, draft_logits, verify_logits, run.sampler, run.accept_top, run.ratio_temperature)
    if run.guard:
        top = torch.topk(verify_logits[: n + 1].float(), 2, dim=-1).values
        close = (top[:, 0] - top[:, 1] < run.guard).nonzero()
        if len(close):
            return _guarded(run, x, draft, int(close[0]))
    rejected = len(draft) - n
    if rejected:
        run.cache.crop(-rejected)  # the cache keeps the anchor and the accepted proposals only
    run.stats["n_verify"] += 1
    run.stats["accepted"].append(n)
    return torch.cat([draft[:n], nxt.reshape(1)])


def _guarded(run: _Run, x, draft, j: int) -> torch.Tensor:
    """The guarded verify (`verify_guard`): verify row j is a near-tie, so the step keeps the
    j draft tokens before it and decides the next one by a single-token AR forward, the
    reference's query shape, over a cache cut back to before the token that row reads."""
    run.stats["accepted"].append(j)
    run.stats["n_verify"] += 1
    if run.traced(j, run.tokens + draft[:j].tolist()):  # the trace has what it needs from the verify block
        return draft[:j]
    run.cache.crop(-(len(draft) + 1 - j))
    run.first = run.step_first + j
    run.stats["n_verify"] += 1
    last = x.reshape(1) if j == 0 else draft[j - 1 : j]
    return torch.cat([draft[:j], run.sampler.pick(run.forward("ar", last)[-1]).reshape(1)])


def _oracle_step(run: _Run, x, remaining) -> torch.Tensor:
    """The consensus step with the reference's own next tokens as the draft: the blocks of
    `_orthrus_step`, no drafter. Past the reference's end (after a divergence) the draft repeats
    its last token, so every block keeps its shape."""
    if remaining == 1 and not run.shorten:
        return _ar_step(run, x, remaining)
    n_draft = min(run.K - 1, remaining if run.shorten else remaining - 1)
    ref = run.oracle[run.first : run.first + n_draft] or run.oracle[-1:] or [int(x)]
    draft = torch.tensor(ref + ref[-1:] * (n_draft - len(ref)), dtype=torch.long, device=x.device)
    return _verify(run, x, draft, None)
