"""Lossless in distribution: the audit of sampled speculative decoding (docs/SAMPLING.md); its command
line is orthrus/audit/sampling_cli.py, the exact distributions it compares are distributions.py.

`orthrus sampling measure --model-path DIR --model-name NAME --prompts eval.parquet --options JSON
 --config JSON [--precisions P...] [--attentions A...] [--device D] --out-tv F.parquet --out-two-sample F.parquet`
measures one Orthrus model two ways, `--config` being the `sampling` section's own keys (orthrus/audit/settings.py):

- Numerics, analytic: along reference trajectories sampled from the model's AR view (fixed
  seed, one token per forward), teacher-forced through the loop's own diffusion and verify
  blocks, the exact output distribution of each speculative row (`step_distribution`, from the
  p and q the loop computes) against the single-step distribution: the total variation at every
  position, for each precision and kernel, temperature and top-p, for the honest loop and the
  planted control (`orthrus-lossy` sampled: q at temperature 1 in the ratio). One row per (cell,
  trajectory) with its per-position TVs.
- Bugs, empirical: for a few prompts per domain, N samples of the first m tokens from the
  speculative loop (honest and planted) and N from plain AR sampling, independent seeds, and a
  two-sample test per prompt (`two_sample_test`). One row per (decoder, prompt).

`orthrus sampling table --tv F... --two-sample F... --length T --alpha A --out-tv sampling_tv.csv
 --out-two-sample sampling_two_sample.csv --figure STEM` summarises them: per cell the mean, p99 and
max per-position TV and the bounds on sequence TV; per prompt the test's p-value and Holm's
rejections over each arm's prompts (family-wise level A).
"""

from __future__ import annotations

import json

import pandas as pd
import torch

from orthrus.audit.distributions import (
    position_tvs,
    prompt_ids,
    reference_trajectory,
    sample_ar,
    sample_prefixes,
    verify_rows,
)
from orthrus.audit.settings import SampledAudit
from orthrus.audit.two_sample import two_sample_prompts, two_sample_test
from orthrus.contracts import SAMPLING_TEST_ROWS, SAMPLING_TV_ROWS
from orthrus.decoders import DIFFUSION_DECODER, PLANTED


def _top_p(value) -> float:
    """A top-p setting as the tables hold it: 1.0 for none."""
    return 1.0 if value is None else float(value)


def measure_tv(model, tokenizer, name: str, prompts: pd.DataFrame, base, cfg: SampledAudit, env: str) -> list[dict]:
    """The analytic part in one (precision, attention) cell: one row per (temperature, top-p,
    prompt), the honest loop's and the planted control's per-position TVs along one reference
    trajectory sampled at that setting (seed `cfg.seed` and the prompt's rank)."""
    from orthrus.decode.loop import Sampler

    rows = []
    for t in cfg.temperatures:
        for top_p in cfg.top_p:
            options = base.replace(temperature=float(t), top_p=top_p, max_new_tokens=cfg.max_new_tokens)
            sampler = Sampler(float(t), options.top_k, top_p)
            for rank, r in enumerate(prompts.itertuples()):
                ids = prompt_ids(tokenizer, r.prompt, options, model.device)
                g = torch.Generator(device=model.device).manual_seed(cfg.seed * 100_003 + rank)
                tokens, single = reference_trajectory(model, ids, options, g)
                blocks = verify_rows(model, ids, tokens, options)
                for decoder, planted in ((DIFFUSION_DECODER, False), (PLANTED, True)):
                    rows.append(
                        {
                            "model": name,
                            "decoder": decoder,
                            "precision": options.precision,
                            "attention": options.attention,
                            "temperature": float(t),
                            "top_p": _top_p(top_p),
                            "prompt_id": r.prompt_id,
                            "domain": r.domain,
                            "n_tokens": len(tokens),
                            "tv": position_tvs(single, blocks, sampler, planted).tolist(),
                            "env": env,
                        }
                    )
    return rows


def measure_two_sample(
    model, tokenizer, name: str, prompts: pd.DataFrame, base, cfg: SampledAudit, env: str
) -> list[dict]:
    """The empirical part: per prompt, N samples of the first m tokens from plain AR sampling and
    from the honest and the planted loop, each arm from its own seed, tested two ways: against the AR
    samples (`two_sample_test`) and against the AR model's probabilities (orthrus/audit/known_p.py).
    N is planned per prompt (`plan_n`) before sampling; one row per (loop, prompt)."""
    import time

    from orthrus.audit.known_p import known_p_test, plan_n
    from orthrus.decode.loop import Sampler
    from orthrus.models.loading import eos_ids

    ts = cfg.two_sample
    options = base.replace(temperature=float(ts.temperature), top_p=ts.top_p, top_k=ts.top_k, max_new_tokens=ts.m)
    eos = set(eos_ids(model, options.eos))
    m, seed = ts.m, cfg.seed * 100_003
    sampler = Sampler(options.temperature, options.top_k, options.top_p)
    rows = []
    for rank, r in enumerate(prompts.itertuples()):
        ids = prompt_ids(tokenizer, r.prompt, options, model.device)
        # the plan's reference trajectories draw from a stream after every arm's
        plan = plan_n(model, ids, options, ts, len(prompts), seed + 3 * len(prompts) + rank)
        n = plan["n_samples"]
        ar = sample_ar(model, ids, options, n, seed + 3 * rank, eos)
        for k, decoder in enumerate((DIFFUSION_DECODER, PLANTED), start=1):
            t0 = time.perf_counter()
            spec = sample_prefixes(model, ids, options.replace(decoder=decoder), n, seed + 3 * rank + k)
            test = two_sample_test(spec, ar, m)
            _, _, p_known = known_p_test(model, ids, spec, m, sampler)
            rows.append(
                {
                    "model": name,
                    "decoder": decoder,
                    "precision": options.precision,
                    "attention": options.attention,
                    "temperature": options.temperature,
                    "top_p": _top_p(options.top_p),
                    "prompt_id": r.prompt_id,
                    "domain": r.domain,
                    "n_samples": n,
                    "m": m,
                    "p_positions": test["p_positions"],
                    "p_prefix": test["p_prefix"],
                    "p_value": test["p_value"],
                    "p_known": p_known,
                    "planned_power": plan["planned_power"],
                    "samples": spec,
                    "ar_samples": ar,
                    "seconds": time.perf_counter() - t0,
                    "env": env,
                }
            )
    return rows


def measure(
    model_path: str,
    name: str,
    prompts: pd.DataFrame,
    base,
    cfg: SampledAudit,
    precisions,
    attentions,
    device: str = "cpu",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both parts: the analytic TV in every (precision, attention) cell, the two-sample test in
    `cfg.two_sample`'s precision and the first attention."""
    from orthrus.data.prompt_set import first_per_domain
    from orthrus.models.loading import load_model
    from orthrus.models.precision import numerical_env, sdpa_backends, with_sdpa

    tv_rows, test_rows = [], []
    ts = cfg.two_sample
    cells = [(p, a) for p in precisions for a in attentions]
    test_cell = (ts.precision, attentions[0])
    if ts.enabled and test_cell not in cells:
        cells.append(test_cell)
    tv_prompts = first_per_domain(prompts, cfg.prompts_per_domain)
    test_prompts = two_sample_prompts(prompts, ts)
    for precision, attention in cells:
        options = base.replace(precision=precision, attention=attention, decoder=DIFFUSION_DECODER)
        model, tokenizer = load_model(model_path, options, device)
        env = json.dumps(
            numerical_env(model) | {"options": options.record(), "sampling": cfg.model_dump()}, sort_keys=True
        )
        with sdpa_backends() as used:  # the cell's SDPA kernels, for its rows' env
            if precision in precisions and attention in attentions:
                tv_rows += measure_tv(model, tokenizer, name, tv_prompts, options, cfg, env)
            if ts.enabled and (precision, attention) == test_cell:
                test_rows += measure_two_sample(model, tokenizer, name, test_prompts, options, cfg, env)
        for r in tv_rows + test_rows:
            r["env"] = with_sdpa(env, used) if r["env"] == env else r["env"]  # this cell's rows
    return pd.DataFrame(tv_rows, columns=SAMPLING_TV_ROWS), pd.DataFrame(test_rows, columns=SAMPLING_TEST_ROWS)
