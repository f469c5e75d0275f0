"""Numerics or a bug: a verdict for one first divergence, from four logits.

At the first position t where a decoder's trajectory leaves the AR reference's, the reference
emitted token r (its own top-1, one token per forward) and the decoder emitted token d. Given
the reference's logits of r and d at t (recomputed step by step in the decoding precision) and
the logits of the same two tokens in the decoder's own pass at t (its verify row):

- `tie`: the reference's logits of r and d are equal in its precision; which one is "first" is
  the argmax's index order, and any other rounding picks the other as legitimately;
- `rounding`: the decoder emitted its own pass's argmax, and the reference ranks r above d by
  at most `max_ulps` units in the last place of the precision at those logits' magnitude: a
  verify block that computes the same sums in another order moves each logit by about that much
  (the bound is the precision's own, `ROUNDING_ULPS`);
- `structural`: the decoder emitted a token its own pass does not rank first, or the reference's
  margin is larger than rounding explains: a bug, not numerics.

No verdict (None, with the reason) where the decoder's pass cannot be recomputed, or where the
step-by-step recomputation does not reproduce the reference's token.
"""

from __future__ import annotations

import argparse
import math

# machine epsilon (the spacing of numbers in [1, 2)) of each decoding precision
# (tf32: fp32 numbers whose matrix products round their inputs to 10 mantissa bits, fp16's)
EPS = {"fp32": 2.0**-23, "fp16": 2.0**-10, "bf16": 2.0**-7, "tf32": 2.0**-10}

# The verdicts' bound in each precision (analysis.rounding_ulps). benchmarks/rounding_noise.py
# measures, on the shipped teacher over 3,072 positions per cell, the largest logit difference
# between a verify block and single steps on the same tokens, in ulps at the row's largest logit:
# 2.0 in bf16, 3.0 in fp16 (bf16 and fp16 logits are rounded to their format at the end), 21.75 in
# fp32 (which keeps every rounding of the network's sums). Two logits that each move by at most d
# change rank only where they are within 2d: the bound is twice the largest, rounded up to a
# power of two.
# tf32 takes fp16's bound: its products carry fp16's mantissa, its sums fp32's (not yet measured
# on a GPU: benchmarks/gpu_check.sh's record is the place to measure it).
ROUNDING_ULPS = {"bf16": 4.0, "fp16": 8.0, "fp32": 64.0, "tf32": 8.0}


# An engine can round coarser than the float type its entry names. llama.cpp (ggml-cpu) keeps the KV
# cache in its own type (f16 by default, whatever the weights), multiplies an F16 or BF16 matrix by
# activations rounded to that type, and a quantized matrix by activations rounded to 8-bit blocks
# (ggml's Q8 vector types: a step of 1/127 of the block's largest value, bf16's relative spacing, so
# bf16's bound is the finest that can explain them; not measured). Another order of the same sums, as a
# batch of other requests brings, moves an operand across one of those roundings and the logits by that
# precision's ulps, not the float type's: docs/ENGINES.md ("Under load") shows it on SmolLM2's Q4_1 file.
ROUNDS_AS = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}  # a float type, GGUF's or ggml's name lowercased
QUANTIZED_ACTIVATIONS = "bf16"


def arithmetic_precision(precision: str, engine_env: dict | None) -> str:
    """The coarsest rounding in an engine run's arithmetic: its entry's `precision` and, for llama.cpp, its
    KV cache's type (`kv_cache`) and the type its weights make the activations (`weights`, a GGUF file
    type: a float type's own, 8-bit blocks for a quantized one), as its record (`engine_env`) names them;
    any other engine's record (vLLM's: one dtype throughout) leaves `precision`."""
    env = engine_env if isinstance(engine_env, dict) else {}
    if env.get("engine") != "llama.cpp":
        return precision
    types = [str(env[k]).lower() for k in ("kv_cache", "weights") if env.get(k) and env[k] != "unknown"]
    return max([precision] + [ROUNDS_AS.get(t, QUANTIZED_ACTIVATIONS) for t in types], key=lambda p: EPS[p])


def rounding_bound(max_ulps: float | dict, precision: str) -> float:
    """The bound in `precision`: `max_ulps` is one number for every precision or {precision: ulps}."""
    if isinstance(max_ulps, dict):
        if precision not in max_ulps:
            raise ValueError(f"no rounding bound for {precision!r} (have {', '.join(max_ulps)})")
        return float(max_ulps[precision])
    return float(max_ulps)


def parse_rounding_ulps(text: str) -> dict:
    """A command line's bound, {precision: ulps}: one number for all (`2`) or one per precision
    (`bf16=4,fp32=64`, a precision left out keeping `ROUNDING_ULPS`'s)."""
    try:
        if "=" not in text:
            bounds = dict.fromkeys(EPS, float(text))
        else:
            bounds = dict(ROUNDING_ULPS)
            for part in text.split(","):
                p, v = (x.strip() for x in part.split("="))
                if p not in EPS:
                    raise ValueError(f"unknown precision {p!r}")
                bounds[p] = float(v)
    except ValueError as e:
        raise ValueError(f"expected ulps or precision=ulps,... ({', '.join(EPS)}), got {text!r} ({e})") from None
    if not all(0 <= v < float("inf") for v in bounds.values()):  # NaN fails too
        raise ValueError(f"every bound must be a finite number >= 0, got {text!r}")
    return bounds


def rounding_ulps_arg(text: str) -> dict:
    """`parse_rounding_ulps` as an argparse type (its message in the usage error)."""
    try:
        return parse_rounding_ulps(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def ulp(x: float, precision: str) -> float:
    """The spacing of `precision`'s numbers at magnitude |x| (normal numbers; 0 counts as 1)."""
    if precision not in EPS:
        raise ValueError(f"precision must be one of {', '.join(EPS)}, got {precision!r}")
    x = abs(float(x)) or 1.0
    return math.ldexp(EPS[precision], math.frexp(x)[1] - 1)


def gap_ulps(ref_logit_ref: float, ref_logit_dec: float, precision: str) -> float:
    """How far the reference ranks its token above the decoder's, in ulps at their magnitude."""
    unit = ulp(max(abs(ref_logit_ref), abs(ref_logit_dec)), precision)
    return (float(ref_logit_ref) - float(ref_logit_dec)) / unit


def verdict(
    ref_logit_ref: float,
    ref_logit_dec: float,
    verify_logit_dec: float | None,
    verify_max: float | None,
    precision: str,
    max_ulps: float | dict,
) -> tuple[str | None, str]:
    """(verdict, note) for one first divergence (see the module docstring). `verify_logit_dec`
    is the decoder's own logit of the token it emitted, `verify_max` its pass's largest logit
    (None or NaN: the pass could not be recomputed)."""
    if verify_logit_dec is None or verify_max is None or math.isnan(verify_logit_dec) or math.isnan(verify_max):
        return None, "the decoder's own pass could not be recomputed"
    max_ulps = rounding_bound(max_ulps, precision)
    if not verify_logit_dec >= verify_max:
        return "structural", "emitted a token that its own pass does not rank first"
    gap = gap_ulps(ref_logit_ref, ref_logit_dec, precision)
    if gap < 0:
        return None, "the step-by-step recomputation does not reproduce the reference's token"
    if gap == 0:
        return "tie", "the reference's two logits are equal"
    if gap <= max_ulps:
        return "rounding", f"reference margin {gap:g} ulp (at most {max_ulps:g})"
    return "structural", f"reference margin {gap:g} ulp, more than rounding explains ({max_ulps:g})"


def external_verdict(
    ref_logit_ref: float, ref_logit_dec: float, precision: str, max_ulps: float | dict, reproduced: bool
) -> tuple[str | None, str]:
    """(verdict, note) for a first divergence of an engine's file (decoder `external`), from the
    in-process reference's logits alone: the engine's own pass is not in the file, so whether it
    emitted its own argmax cannot be checked, and `structural` is never said. `reproduced`: the
    reference model, one token per forward, picks the compared trajectory's token (not so where
    an engine's own plain run is the reference and its kernel ranks otherwise)."""
    if not reproduced:
        return None, "the reference model does not pick the compared trajectory's token here (another engine's kernel)"
    max_ulps = rounding_bound(max_ulps, precision)
    gap = gap_ulps(ref_logit_ref, ref_logit_dec, precision)
    if gap == 0:
        return "tie", "the reference's two logits are equal (the engine's own logits are not in its file)"
    if gap <= max_ulps:
        return "rounding", (
            f"reference margin {gap:g} ulp (at most {max_ulps:g}); the engine's own logits are not in "
            "its file, so whether it emitted its own argmax is unchecked"
        )
    return None, (
        f"reference margin {gap:g} ulp, more than rounding explains ({max_ulps:g}); without the engine's "
        "logits another kernel's numerics and a bug cannot be told apart"
    )


def engine_margin(top: list, token: int, other: int) -> tuple[float | None, bool]:
    """The engine's own log-probability of `token` minus that of `other` at one position, from its
    top-k pairs [[id, logprob], ...] (rank order): (margin, exact). Where `other` is outside the
    top k, the margin is at least `token`'s lead over the best other listed token (exact False);
    None where `token` itself is outside."""
    lp = {int(t): float(v) for t, v in top}
    if token not in lp:
        return None, False
    if other in lp:
        return lp[token] - lp[other], True
    rest = [v for t, v in lp.items() if t != token]
    return (lp[token] - max(rest) if rest else None), False


def engine_verdict(
    top: list,
    token: int,
    ref_token: int,
    ref_logit_ref: float,
    ref_logit_dec: float,
    precision: str,
    max_ulps: float | dict,
    reproduced: bool,
) -> tuple[str | None, str]:
    """(verdict, note) for a first divergence of an engine's file that gives the engine's own
    top-k log-probabilities at the position (`top`, [[id, logprob], ...]): the in-process
    verdict's questions asked of the engine's own pass. A difference of two log-probabilities is
    the difference of their logits (one normalizer), measured in ulps at the logits' magnitude,
    which the in-process reference's logits of the two tokens give (same model, same prefix).

    - `structural`: the engine emitted a token its own pass does not rank first (a bug in the
      engine's acceptance or sampling), or its own margin for it over the reference's token is
      larger than rounding explains;
    - `tie`: the engine's own two log-probabilities are equal, or the reference's two logits are;
    - `rounding`: it emitted its own argmax, by a margin over the reference's token of at most
      `max_ulps`;
    - None where the reference's token is outside the engine's top k and its lead over the
      runner-up is within the bound (its margin over the reference's token is then unknown)."""
    max_ulps = rounding_bound(max_ulps, precision)
    lp = {int(t): float(v) for t, v in top}
    best = max(lp.values())
    if token not in lp or lp[token] < best:
        return "structural", "the engine emitted a token that its own pass does not rank first"
    unit = ulp(max(abs(ref_logit_ref), abs(ref_logit_dec)), precision)
    margin, exact = engine_margin(top, token, ref_token)
    own = margin / unit if margin is not None else math.nan
    if exact and own == 0:
        return "tie", "the engine's own two log-probabilities are equal"
    if reproduced and gap_ulps(ref_logit_ref, ref_logit_dec, precision) == 0:
        return "tie", f"the reference's two logits are equal (the engine's own margin {own:g} ulp)"
    if exact and own <= max_ulps:
        return "rounding", f"engine's own margin {own:g} ulp over the reference's token (at most {max_ulps:g})"
    if own > max_ulps:
        what = "over the reference's token" if exact else "over its runner-up, the reference's token below its top 2"
        return "structural", f"engine's own margin {own:g} ulp {what}, more than rounding explains ({max_ulps:g})"
    return None, (
        f"the reference's token is outside the engine's top {len(top)} and its lead over the runner-up is "
        f"{own:g} ulp, within the bound: its margin over the reference's token is unknown"
    )
