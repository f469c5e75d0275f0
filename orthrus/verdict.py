"""Numerics or a bug: a verdict for one first divergence, from four logits.

At the first position t where a decoder's trajectory leaves the AR reference's, the reference
emitted token r (its own top-1, one token per forward) and the decoder emitted token d. Given
the reference's logits of r and d at t (recomputed step by step in the decoding precision) and
the logits of the same two tokens in the decoder's own pass at t (its verify row):

- `tie`: the reference's logits of r and d are equal in its precision; which one is "first" is
  the argmax's index order, and any other rounding picks the other as legitimately;
- `rounding`: the decoder emitted its own pass's argmax, and the reference ranks r above d by
  at most `max_ulps` units in the last place of the precision at those logits' magnitude: a
  verify block that computes the same sums in another order moves each logit by about that much;
- `structural`: the decoder emitted a token its own pass does not rank first, or the reference's
  margin is larger than rounding explains: a bug, not numerics.

No verdict (None, with the reason) where the decoder's pass cannot be recomputed, or where the
step-by-step recomputation does not reproduce the reference's token.
"""
from __future__ import annotations

import math

# machine epsilon (the spacing of numbers in [1, 2)) of each decoding precision
EPS = {"fp32": 2.0 ** -23, "fp16": 2.0 ** -10, "bf16": 2.0 ** -7}


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


def verdict(ref_logit_ref: float, ref_logit_dec: float, verify_logit_dec: float | None,
            verify_max: float | None, precision: str, max_ulps: float) -> tuple[str | None, str]:
    """(verdict, note) for one first divergence (see the module docstring). `verify_logit_dec`
    is the decoder's own logit of the token it emitted, `verify_max` its pass's largest logit
    (None or NaN: the pass could not be recomputed)."""
    if verify_logit_dec is None or verify_max is None or math.isnan(verify_logit_dec) or math.isnan(verify_max):
        return None, "the decoder's own pass could not be recomputed"
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


def external_verdict(ref_logit_ref: float, ref_logit_dec: float, precision: str, max_ulps: float,
                     reproduced: bool) -> tuple[str | None, str]:
    """(verdict, note) for a first divergence of an engine's file (decoder `external`), from the
    in-process reference's logits alone: the engine's own pass is not in the file, so whether it
    emitted its own argmax cannot be checked, and `structural` is never said. `reproduced`: the
    reference model, one token per forward, picks the compared trajectory's token (not so where
    an engine's own plain run is the reference and its kernel ranks otherwise)."""
    if not reproduced:
        return None, "the reference model does not pick the compared trajectory's token here (another engine's kernel)"
    gap = gap_ulps(ref_logit_ref, ref_logit_dec, precision)
    if gap == 0:
        return "tie", "the reference's two logits are equal (the engine's own logits are not in its file)"
    if gap <= max_ulps:
        return "rounding", (f"reference margin {gap:g} ulp (at most {max_ulps:g}); the engine's own logits are not in "
                            "its file, so whether it emitted its own argmax is unchecked")
    return None, (f"reference margin {gap:g} ulp, more than rounding explains ({max_ulps:g}); without the engine's "
                  "logits another kernel's numerics and a bug cannot be told apart")
