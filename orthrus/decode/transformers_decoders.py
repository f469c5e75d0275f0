"""transformers' own decoders, run through `generate()` as the decoder table's `generate` runner:
the reference (`ar-ref`), its batched control (`ar-batched`), `assisted` with a draft model and
`prompt-lookup`; a forward hook counts the model's (and the draft's) forwards and a streamer the
tokens each step emits, without touching the library's loop (orthrus/decode/stage.py runs them).
Also the library settings a speculative decoder ran with, for the rows' `env`."""

from __future__ import annotations

import time

import torch

from orthrus.decode.trajectory import Trajectory, finish_reason
from orthrus.decoders import DECODER
from orthrus.models.hub import snapshot_commit
from orthrus.models.loading import eos_ids
from orthrus.options import DecodeOptions, OptionsError


class StepSizes:
    """A generate() streamer that records how many tokens each put carries: the prompt first,
    then the tokens of every decoding step."""

    def __init__(self):
        self.sizes = []

    def put(self, value):
        self.sizes.append(int(value.numel()))

    def end(self):
        pass


def count_forwards(module) -> tuple[list[int], object]:
    n = [0]
    return n, module.register_forward_hook(lambda *_: n.__setitem__(0, n[0] + 1))


class StopAfter:
    """A generate() stopping criterion: stop once every row holds `length` tokens. Unlike a smaller
    max_new_tokens it leaves each step as the full run took it (transformers' speculative
    decoders size their last drafts by the room left), so a replay stopped early emits the run's
    tokens and logits up to there."""

    def __init__(self, length: int):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, device=input_ids.device)


def _stopping(width: int, stop_after: int | None) -> dict:
    if stop_after is None:
        return {}
    from transformers import StoppingCriteriaList

    return {"stopping_criteria": StoppingCriteriaList([StopAfter(width + stop_after)])}


# what transformers' generate() takes for each decoder the decoder table runs through it (runner
# `generate`), beyond the plain greedy call: the decoder's own function
GENERATE_ARGS = {
    "assisted": lambda options, draft: {"assistant_model": draft},
    "prompt-lookup": lambda options, draft: {"prompt_lookup_num_tokens": options.prompt_lookup_tokens},
}


def hf_generate(
    model, ids: torch.Tensor, options: DecodeOptions, draft=None, logits: bool = False, stop_after: int | None = None
):
    """Greedy transformers generate(): plain (`ar-ref`), assisted by `draft`, or with prompt lookup
    (and the ar-batched control's batch of one). With `logits`, also the logits generate returns
    for every emitted token (`output_logits`: the verify pass's rows for the speculative ones).
    `stop_after`: stop once that many tokens are out (the forensics' replays need no more)."""
    eos = eos_ids(model, "generation_config")  # what transformers' generate stops on
    pad = model.generation_config.pad_token_id
    if DECODER[options.decoder].needs_draft and draft is None:
        raise OptionsError(f"the {options.decoder} decoder needs a draft model")
    speculative = GENERATE_ARGS.get(options.decoder, lambda o, d: {})(options, draft)
    if DECODER[options.decoder].batched:
        if not logits:
            return batched_generate(model, [ids], options, stop_after=stop_after)[0]
        rows, scores = batched_generate(model, [ids], options, logits=True, stop_after=stop_after)
        return rows[0], [x[0] for x in scores]
    steps = StepSizes()
    counters = [count_forwards(m) for m in (model, speculative.get("assistant_model")) if m is not None]
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                ids[None],
                attention_mask=torch.ones_like(ids[None]),
                do_sample=False,
                max_new_tokens=options.max_new_tokens,
                pad_token_id=pad if pad is not None else eos[0],
                streamer=steps,
                return_dict_in_generate=True,
                output_logits=logits,
                **speculative,
                **_stopping(len(ids), stop_after),
            )
        seconds = time.perf_counter() - t0
    finally:
        for _, hook in counters:
            hook.remove()
    tokens = out.sequences[0, len(ids) :].tolist()
    forwards = counters[0][0][0]
    row = Trajectory(
        tokens=tokens,
        accepted=[n - 1 for n in steps.sizes[1:]] if speculative else [],
        n_prefill=1,
        n_diffusion=counters[1][0][0] if len(counters) > 1 else 0,
        n_verify=max(forwards - 1, 0),
        seconds=seconds,
        finish_reason=finish_reason(tokens, eos),
    )
    return (row, [x[0] for x in out.logits]) if logits else row


def left_padded(model, batch: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Prompts as one left-padded batch, as transformers batches them: (input ids, attention
    mask, the pad id)."""
    eos = eos_ids(model, "generation_config")
    pad = model.generation_config.pad_token_id
    pad = pad if pad is not None else eos[0]
    width = max(len(ids) for ids in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long, device=model.device)
    mask = torch.zeros_like(input_ids)
    for i, ids in enumerate(batch):
        input_ids[i, width - len(ids) :] = ids
        mask[i, width - len(ids) :] = 1
    return input_ids, mask, pad


def batched_generate(
    model, batch: list[torch.Tensor], options: DecodeOptions, logits: bool = False, stop_after: int | None = None
):
    """The ar-batched control: greedy transformers generate() over one left-padded batch. One
    dict per prompt (as hf_generate's), and with `logits` the per-step logits (a tuple of
    (batch, vocab) tensors) for the forensics; `stop_after` as hf_generate's."""
    eos = eos_ids(model, "generation_config")
    input_ids, mask, pad = left_padded(model, batch)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=options.max_new_tokens,
            pad_token_id=pad,
            return_dict_in_generate=True,
            output_logits=logits,
            **_stopping(input_ids.shape[1], stop_after),
        )
    seconds = (time.perf_counter() - t0) / len(batch)
    rows = []
    for seq in out.sequences[:, input_ids.shape[1] :].tolist():
        end = next((i + 1 for i, t in enumerate(seq) if t in eos), len(seq))  # finished rows continue as padding
        tokens = seq[:end]
        rows.append(
            Trajectory(
                tokens=tokens,
                n_prefill=1,
                n_verify=max(len(tokens) - 1, 0),
                seconds=seconds,
                finish_reason=finish_reason(tokens, eos),
            )
        )
    return (rows, out.logits) if logits else rows


def _assisted_settings(model, draft, draft_name: str | None) -> dict:
    from transformers import GenerationConfig

    keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    defaults = GenerationConfig._get_default_generation_params()
    given = draft.generation_config
    return {
        "draft": draft_name,
        "draft_commit": snapshot_commit(draft.name_or_path),
        "draft_parameters": sum(p.numel() for p in draft.parameters()),
    } | {k: getattr(given, k, None) if getattr(given, k, None) is not None else defaults[k] for k in keys}


def _lookup_settings(model, draft, draft_name: str | None) -> dict:
    # transformers' PromptLookupCandidateGenerator takes `max_matching_ngram_size or 2`
    return {"max_matching_ngram_size": getattr(model.generation_config, "max_matching_ngram_size", None) or 2}


# the library settings a transformers speculative decoder ran with (its defaults unless the model's
# generation config sets them), for the rows' `env`: the decoder's own function
GENERATE_SETTINGS = {"assisted": _assisted_settings, "prompt-lookup": _lookup_settings}


def speculative_settings(options: DecodeOptions, model, draft, draft_name: str | None) -> dict:
    settings = GENERATE_SETTINGS.get(options.decoder)
    return settings(model, draft, draft_name) if settings else {}
