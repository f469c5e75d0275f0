"""The study's verdicts on a release's records: the audit's side, the same for every case.

- greedy: the speculative arm must emit the reference arm's tokens. At a prompt's first divergence the
  reference arm's own top-2 logits at that prefix (the engine's own pass, from its record) say whether
  the speculative token is a tie, a rounding (within the precision's bound, orthrus.audit.verdict) or
  `structural`: a token the engine's own pass ranks below its first by more than rounding explains. The
  case is caught when any prompt's divergence is structural.
- sampled: the speculative arm's first `positions` tokens, per prefix stratum, against the target's own
  probabilities after the case's sampling settings (orthrus.audit.known_p, computed here in float64
  from the subject in fp32): the case is caught when the test rejects at `alpha`. The reference arm,
  the release's plain sampling, takes the same test as a control: a test that rejects honest sampling
  would make every catch worthless, so a rejected control makes the row `invalid`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from orthrus.audit.verdict import ROUNDING_ULPS, arithmetic_precision, ulp
from orthrus.stats import first_divergence
from orthrus.zoo.cases import Case
from orthrus.zoo.subjects import prompt_ids


def read(path: Path) -> tuple[dict, list[dict]]:
    lines = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    if not lines or "environment" not in lines[0]:
        raise ValueError(f"{path}: the first line is not the driver's environment")
    return lines[0]["environment"], lines[1:]


def arms(records: list[dict]) -> dict[str, dict[str, list]]:
    """{arm: {prompt_id: [record, ...] in sample order}}."""
    out: dict[str, dict[str, list]] = {}
    for r in sorted(records, key=lambda r: (r["arm"], r["prompt_id"], r["sample"])):
        out.setdefault(r["arm"], {}).setdefault(r["prompt_id"], []).append(r)
    return out


# A server gives log-probabilities, not logits: their difference is the logits' difference, but their
# magnitude (near 0) is not the logits', whose ulps the rounding moves. Such a margin is measured in ulps
# at this magnitude, above any logit of the subjects studied (the tiny world's reach about 15, SmolLM2's
# about 30): a coarser unit, so rounding is never called structural for want of the logits.
LOGPROB_SCALE = 64.0


def divergence_verdict(top2: list, token: int, precision: str, scale: float = 0.0) -> tuple[str | None, float]:
    """(verdict, margin in ulps) of emitting `token` where the engine's own pass ranked top2[0] first;
    `scale`: the least magnitude the ulps are taken at (LOGPROB_SCALE for log-probabilities)."""
    (best, l1), (second, l2) = top2
    if token == best:
        return None, 0.0
    exact = token == second
    units = (l1 - l2) / ulp(max(abs(l1), abs(l2), scale), precision)  # a lower bound unless token is second
    if exact and units == 0:
        return "tie", 0.0
    if units <= ROUNDING_ULPS[precision]:
        return ("rounding" if exact else None), units
    return "structural", units


def greedy(records: list[dict], environment: dict) -> dict:
    by_arm = arms(records)
    precision = arithmetic_precision("fp32", environment)
    scale = LOGPROB_SCALE if environment.get("top2") == "log-probabilities" else 0.0
    counts = {"prompts": 0, "divergent": 0, "structural": 0, "rounding": 0, "tie": 0, "unexplained": 0}
    worst = 0.0
    for pid, refs in by_arm["reference"].items():
        ref, spec = refs[0], by_arm["speculative"][pid][0]
        counts["prompts"] += 1
        t = first_divergence(ref["tokens"], spec["tokens"])
        if t is None:
            continue
        counts["divergent"] += 1
        if t >= min(len(ref["tokens"]), len(spec["tokens"])) or t >= len(ref.get("top2") or []):
            counts["unexplained"] += 1  # one stopped where the other went on: no logits at that position
            continue
        v, units = divergence_verdict(ref["top2"][t], spec["tokens"][t], precision, scale)
        counts[v or "unexplained"] += 1
        worst = max(worst, units)
    caught = counts["structural"] > 0
    return counts | {"statistic": worst, "statistic_name": f"largest margin at a divergence ({precision} ulps)",
                     "precision": precision, "caught": caught, "n": counts["prompts"]}  # fmt: skip


def target(subject: dict):
    from transformers import AutoModelForCausalLM

    path = subject.get("hf_teacher") or subject["teacher"]
    return AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()


def sampled(case: Case, subject: dict, records: list[dict]) -> dict[str, dict]:
    """Per arm: the known-probability test summed over prompts (statistic, dof, p, samples)."""
    import torch
    from scipy.stats import chi2

    from orthrus.audit.known_p import prefix_probs, strata, stratified_gof
    from orthrus.decode.loop import Sampler

    model = target(subject)
    s = case.sampling
    sampler = Sampler(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
    ids = {p["id"]: torch.tensor(p["ids"]) for p in prompt_ids(case.prompts)}
    out = {}
    for arm, per_prompt in arms(records).items():
        stat = dof = 0.0
        for pid, rows in per_prompt.items():
            groups = strata([r["tokens"] for r in rows], case.positions)
            st, d, _ = stratified_gof(groups, prefix_probs(model, ids[pid], list(groups), sampler))
            stat, dof = stat + st, dof + d
        p = float(chi2.sf(stat, dof)) if dof else 1.0
        out[arm] = {"statistic": stat, "dof": int(dof), "p_value": p, "n": len(next(iter(per_prompt.values())))}
    return out


def power_at(test: dict, n_pilot: int, n: int, alpha: float) -> float:
    """The power at n samples per prompt of the test the pilot ran: its noncentrality (statistic minus
    degrees of freedom, the estimate of n_pilot samples' worth) grows as n / n_pilot; the degrees of
    freedom are held at the pilot's (more strata reach the test's minimum size at larger n)."""
    from scipy.stats import chi2, ncx2

    lam = max(test["statistic"] - test["dof"], 0.0) * n / n_pilot
    if not test["dof"] or not math.isfinite(lam):
        return 1.0 if not math.isfinite(lam) else alpha
    return float(ncx2.sf(chi2.isf(alpha, test["dof"]), test["dof"], lam)) if lam > 0 else alpha


def power_plan(test: dict, n_pilot: int, target_power: float, alpha: float, ceiling: int) -> dict:
    n = n_pilot
    while n < ceiling and power_at(test, n_pilot, n, alpha) < target_power:
        n = min(ceiling, math.ceil(n * 1.25))
    pw = power_at(test, n_pilot, n, alpha)
    line = (f"plan: {n} samples per prompt, power {pw:.3f} against the pilot's effect (pilot {n_pilot} per prompt: "
            f"statistic {test['statistic']:.1f} on {test['dof']} dof)")  # fmt: skip
    print(line, flush=True)
    return {"samples": n, "power": pw, "source": line, "pilot": test}


def verdict(case: Case, subject: dict, records: list[dict], environment: dict, planned: dict) -> dict:
    """The row's verdict: `caught`, `passed`, `underpowered` (a miss under a plan short of the case's
    power) or `invalid` (the test rejected the release's own plain sampling)."""
    if case.sampling is None:
        g = greedy(records, environment)
        return g | {"verdict": "caught" if g["caught"] else "passed"}
    tests = sampled(case, subject, records)
    spec, control = tests["speculative"], tests.get("reference")
    row = {k: spec[k] for k in ("statistic", "dof", "p_value", "n")} | {"statistic_name": "known-p chi-square",
           "control_p_value": control["p_value"] if control else None, "power": planned.get("power")}  # fmt: skip
    if control and control["p_value"] < case.alpha:
        return row | {"verdict": "invalid", "reason": "the test rejected the release's plain sampling"}
    if spec["p_value"] < case.alpha:
        return row | {"verdict": "caught"}
    short = planned.get("power") is not None and planned["power"] < case.power
    return row | {"verdict": "underpowered" if short else "passed"}
