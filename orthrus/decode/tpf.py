"""Tokens per forward of one response from its recorded counts: the one place they are computed
(`orthrus.generate`'s stats and `orthrus analyze`'s TPF tables). Pure Python: light stages use it."""

from __future__ import annotations

import math


def tpf_authors(accepted) -> float:
    """The follow-up paper's tokens per forward (`my_generate` in the authors'
    eval/eval_speed_orthrus.py): (1 + sum of accepted draft lengths) / (1 + verify passes).

    The prefill counts one token and one forward; each consensus step counts its accepted
    proposals but not the AR correction/bonus token it also emits, so this comes out about one
    lower than `tpf_verify`. The one place it is computed: from the recorded accepted lengths.
    """
    accepted = [int(a) for a in accepted]
    return (1 + sum(accepted)) / (1 + len(accepted))


def tokens_per_forward(
    n_tokens: int, n_prefill: float, n_diffusion: float, n_verify: float, accepted=None, undefined: float = math.nan
) -> dict[str, float]:
    """`tpf_verify`: tokens / the model's forwards (prefill + verify); `tpf_all`: tokens / every
    forward, the proposer's too (Orthrus's diffusion passes, an assisted draft model's);
    `tpf_authors`: `tpf_authors(accepted)`, only where `accepted` is given and the loop had a
    separate prefill (Orthrus's; transformers' assisted loop merges it into its first verification).
    A value whose forwards are zero (or unrecorded, NaN) is `undefined`.
    """
    model_forwards = n_prefill + n_verify
    all_forwards = model_forwards + n_diffusion
    return {
        "tpf_verify": n_tokens / model_forwards if model_forwards > 0 else undefined,
        "tpf_all": n_tokens / all_forwards if all_forwards > 0 else undefined,
        "tpf_authors": tpf_authors(accepted) if accepted is not None and n_prefill > 0 else undefined,
    }
