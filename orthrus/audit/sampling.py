"""Lossless in distribution: the audit of sampled speculative decoding (docs/SAMPLING.md).

`orthrus sampling measure --model-path DIR --model-name NAME --prompts eval.parquet --options JSON
 --config JSON [--precisions P...] [--attentions A...] [--device D] --out-tv F.parquet --out-two-sample F.parquet`
measures one Orthrus model two ways, `--config` being the validated `sampling` section:

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

import argparse
import json
import sys

import numpy as np
import pandas as pd
import torch

from orthrus.audit.two_sample import two_sample_prompts, two_sample_test
from orthrus.contracts import (
    SAMPLING_TEST_ROWS,
    SAMPLING_TV_ROWS,
)
from orthrus.decoders import DECODER, DIFFUSION_DECODER, PLANTED, names
from orthrus.errors import InputError

(VIEW,) = names(model="orthrus", role="view")  # the loop's own AR view, one token per forward


def step_distribution(p: torch.Tensor, q: torch.Tensor, q_ratio: torch.Tensor | None = None) -> torch.Tensor:
    """The exact distribution of the token one speculative row emits, in float64, from the
    probabilities the loop computed (`orthrus.decoding.consensus`): a draft drawn from q (as
    torch.multinomial draws it: q renormalised), accepted with probability min(1, p/q_ratio),
    else a draw from the residual max(0, p - q_ratio), renormalised.

    `q_ratio` is q for an honest loop; the planted control computes it at another temperature.
    The result is min(p, q) + (1 - sum min(p, q)) * normalize(max(0, p - q)) for the honest
    loop, which is p when p and q are distributions. The acceptance test `u < p/q` with u from
    torch.rand (a 24-bit grid) differs from min(1, p/q) by less than 2^-24 per row: left out."""
    p, q = p.double(), q.double()
    qr = q if q_ratio is None else q_ratio.double()
    draw = q / q.sum(-1, keepdim=True)
    # a draft the loop never draws (q = 0) contributes nothing, whatever its ratio
    accept = torch.where(draw > 0, torch.clamp(p / qr, max=1.0).nan_to_num(nan=0.0), torch.zeros_like(p))
    kept = draw * accept
    rejected = (1 - kept.sum(-1, keepdim=True)).clamp_min(0)
    residual = (p - qr).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    # p == q_ratio everywhere: nothing is rejected in exact arithmetic, and the residual is empty
    resampled = torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(p))
    return kept + rejected * resampled


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Half the L1 distance over the last axis, in float64 (each side renormalised, as a
    multinomial draw renormalises its weights)."""
    a, b = a.double(), b.double()
    return 0.5 * (a / a.sum(-1, keepdim=True) - b / b.sum(-1, keepdim=True)).abs().sum(-1)


def tv_summary(per_trajectory: list[np.ndarray], length: int) -> dict:
    """Per-position TVs of several trajectories: their mean, 99th percentile and maximum, the
    number of positions, and two bounds on the TV between the speculative decoder's and the AR
    sampler's sequence distributions. By the chain rule TV(P, Q) <= E_{y~P} sum_t TV_t(y_<t)
    (P the AR model, the expectation over its own trajectories): `seq_bound` is that sum's mean
    over the reference trajectories (each capped at 1), `bound_at_length` the mean TV times
    `length` (a response of the study's length)."""
    flat = np.concatenate([np.asarray(t, dtype=np.float64) for t in per_trajectory]) if per_trajectory else np.zeros(0)
    if not len(flat):
        nan = float("nan")
        return {
            "n_trajectories": len(per_trajectory),
            "n_positions": 0,
            "tv_mean": nan,
            "tv_p99": nan,
            "tv_max": nan,
            "seq_bound": nan,
            "bound_at_length": nan,
        }
    sums = [min(1.0, float(np.sum(t))) for t in per_trajectory]
    mean = float(flat.mean())
    return {
        "n_trajectories": len(per_trajectory),
        "n_positions": int(len(flat)),
        "tv_mean": mean,
        "tv_p99": float(np.quantile(flat, 0.99)),
        "tv_max": float(flat.max()),
        "seq_bound": float(np.mean(sums)),
        "bound_at_length": min(1.0, mean * length),
    }


# ---- the model part (torch and transformers imported by the functions that need them)


def reference_trajectory(model, ids: torch.Tensor, options, generator: torch.Generator):
    """A trajectory sampled from the model's AR view (one token per forward, as plain sampling
    runs), and the logits of every single-step forward that chose a token (row t predicts
    token t)."""
    from orthrus.decode.loop import generate

    rows = []

    def keep(forward, tokens):
        rows.append(forward.logits.float())
        return False

    out = generate(model, ids, options.replace(decoder=VIEW), generator=generator, trace=keep)
    tokens = out.tokens.tolist()
    return tokens, torch.cat(rows)[: len(tokens)]


def verify_rows(
    model, ids: torch.Tensor, tokens: list[int], options
) -> list[tuple[int, torch.Tensor, torch.Tensor | None]]:
    """The reference's tokens teacher-forced through the Orthrus loop's own blocks, every draft
    accepted: per generated position t >= 1, (t, the AR row that decides it, the diffusion row
    that drafted it, or None for a bonus row or a single AR step). The blocks are those of
    `orthrus.decoding._orthrus_step` with the reference's tokens as the draft, so every row of
    a verify block appears (a sampled run's blocks start wherever a rejection ends the last)."""
    from transformers import DynamicCache

    from orthrus.decode.loop import ar_forward, diffusion_proposals

    cache = DynamicCache(config=model.config)
    ar_forward(model, ids, cache, last_only=options.prefill_logits == "last")
    K = options.block_size or model.block_size
    shorten = options.last_block == "shorten"
    L, s, rows = len(tokens), 0, []
    with torch.inference_mode():
        while s < L - 1:
            remaining = L - 1 - s
            x = torch.tensor([tokens[s]], dtype=torch.long, device=model.device)
            if remaining == 1 and not shorten:  # the loop's plain AR step over the verify-written cache
                rows.append((s + 1, ar_forward(model, x, cache)[0][-1].float(), None))
                break
            if shorten:
                draft_logits = diffusion_proposals(model, x[0], cache, min(K, remaining + 1))
            else:
                draft_logits = diffusion_proposals(model, x[0], cache, K)[: remaining - 1]
            n = len(draft_logits)
            draft = torch.tensor(tokens[s + 1 : s + 1 + n], dtype=torch.long, device=model.device)
            verify = ar_forward(model, torch.cat([x, draft]), cache)[0].float()
            rows += [(s + 1 + i, verify[i], draft_logits[i].float()) for i in range(n)]
            if s + 1 + n < L:
                rows.append((s + 1 + n, verify[n], None))
            s += n + 1
    return rows


def row_distributions(single_logits: torch.Tensor, rows, sampler, planted: bool = False):
    """Per position of `rows` (verify_rows), the speculative row's exact output distribution and the
    single-step distribution (`sampler` an `orthrus.decode.loop.Sampler`), in float64; `planted`: the
    control whose ratio takes q at temperature 1."""
    from orthrus.decode.loop import Sampler

    t = torch.tensor([r[0] for r in rows], device=single_logits.device)
    p_single = sampler.probs(single_logits[t])
    p_verify = sampler.probs(torch.stack([r[1] for r in rows]))
    out = p_verify.double().clone()
    drafted = [i for i, r in enumerate(rows) if r[2] is not None]
    if drafted:
        logits = torch.stack([rows[i][2] for i in drafted])
        q = sampler.probs(logits)
        ratio_t = DECODER[PLANTED].ratio_temperature  # the planted row's acceptance rule
        q_ratio = Sampler(ratio_t, sampler.top_k, sampler.top_p).probs(logits) if planted else None
        out[drafted] = step_distribution(p_verify[drafted], q, q_ratio)
    return out, p_single


def position_tvs(single_logits: torch.Tensor, rows, sampler, planted: bool = False) -> np.ndarray:
    """Per position, the TV between the speculative row's exact output distribution and the
    single-step distribution (`row_distributions`)."""
    if not rows:
        return np.zeros(0)
    out, p_single = row_distributions(single_logits, rows, sampler, planted)
    return total_variation(out, p_single).cpu().numpy()  # the model's device may be a GPU


def sample_prefixes(model, ids: torch.Tensor, options, n: int, seed: int) -> list[list[int]]:
    """n samples of the first `options.max_new_tokens` tokens from the decoder of `options`,
    each a full run of the loop, from one generator seeded with `seed`."""
    from orthrus.decode.loop import generate

    g = torch.Generator(device=model.device).manual_seed(seed)
    return [generate(model, ids, options, generator=g).tokens.tolist() for _ in range(n)]


def sample_ar(model, ids: torch.Tensor, options, n: int, seed: int, eos: set[int]) -> list[list[int]]:
    """n samples of the first `options.max_new_tokens` tokens by plain AR sampling, the n rows in
    one batch (one forward per token; an independent implementation of what the decoder's
    single steps do, with the same `Sampler`), each cut after its first EOS."""
    from transformers import DynamicCache

    from orthrus.decode.loop import Sampler

    g = torch.Generator(device=model.device).manual_seed(seed)
    sampler = Sampler(options.temperature, options.top_k, options.top_p, g)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        logits = model(
            input_ids=ids[None].expand(n, -1), past_key_values=cache, use_cache=True, logits_to_keep=1
        ).logits[:, -1]
        steps = []
        for i in range(options.max_new_tokens):
            steps.append(sampler.sample(sampler.probs(logits)))
            if i + 1 < options.max_new_tokens:
                logits = model(input_ids=steps[-1][:, None], past_key_values=cache, use_cache=True).logits[:, -1]
    out = []
    for row in torch.stack(steps, 1).tolist() if steps else [[] for _ in range(n)]:
        end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        out.append(row[:end])
    return out


# ---- the measurement

CELL = ["model", "decoder", "precision", "attention", "temperature", "top_p"]


def _top_p(value) -> float:
    """A top-p setting as the tables hold it: 1.0 for none."""
    return 1.0 if value is None else float(value)


def _prompt_ids(tokenizer, prompt: str, options, device) -> torch.Tensor:
    from orthrus.chat import render_chat

    return torch.tensor(render_chat(tokenizer, prompt, options.message), dtype=torch.long, device=device)


def measure_tv(model, tokenizer, name: str, prompts: pd.DataFrame, base, cfg: dict, env: str) -> list[dict]:
    """The analytic part in one (precision, attention) cell: one row per (temperature, top-p,
    prompt), the honest loop's and the planted control's per-position TVs along one reference
    trajectory sampled at that setting (seed `cfg["seed"]` and the prompt's rank)."""
    from orthrus.decode.loop import Sampler

    rows = []
    for t in cfg["temperatures"]:
        for top_p in cfg["top_p"]:
            options = base.replace(temperature=float(t), top_p=top_p, max_new_tokens=cfg["max_new_tokens"])
            sampler = Sampler(float(t), options.top_k, top_p)
            for rank, r in enumerate(prompts.itertuples()):
                ids = _prompt_ids(tokenizer, r.prompt, options, model.device)
                g = torch.Generator(device=model.device).manual_seed(int(cfg["seed"]) * 100_003 + rank)
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


def measure_two_sample(model, tokenizer, name: str, prompts: pd.DataFrame, base, cfg: dict, env: str) -> list[dict]:
    """The empirical part: per prompt, N samples of the first m tokens from plain AR sampling and
    from the honest and the planted loop, each arm from its own seed, tested two ways: against the AR
    samples (`two_sample_test`) and against the AR model's probabilities (orthrus/audit/known_p.py).
    N is planned per prompt (`plan_n`) before sampling; one row per (loop, prompt)."""
    import time

    from orthrus.audit.known_p import known_p_test, plan_n
    from orthrus.decode.loop import Sampler
    from orthrus.models.loading import eos_ids

    ts = cfg["two_sample"]
    options = base.replace(
        temperature=float(ts["temperature"]), top_p=ts["top_p"], top_k=ts.get("top_k"), max_new_tokens=ts["m"]
    )
    eos = set(eos_ids(model, options.eos))
    m, seed = ts["m"], int(cfg["seed"]) * 100_003
    sampler = Sampler(options.temperature, options.top_k, options.top_p)
    rows = []
    for rank, r in enumerate(prompts.itertuples()):
        ids = _prompt_ids(tokenizer, r.prompt, options, model.device)
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
    model_path: str, name: str, prompts: pd.DataFrame, base, cfg: dict, precisions, attentions, device: str = "cpu"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both parts: the analytic TV in every (precision, attention) cell, the two-sample test in
    `cfg["two_sample"]`'s precision and the first attention."""
    from orthrus.data.prompt_set import first_per_domain
    from orthrus.models.loading import load_model
    from orthrus.models.precision import numerical_env, sdpa_backends, with_sdpa

    tv_rows, test_rows = [], []
    ts = cfg["two_sample"]
    cells = [(p, a) for p in precisions for a in attentions]
    test_cell = (ts["precision"], attentions[0])
    if ts["enabled"] and test_cell not in cells:
        cells.append(test_cell)
    tv_prompts = first_per_domain(prompts, cfg["prompts_per_domain"])
    test_prompts = two_sample_prompts(prompts, ts)
    for precision, attention in cells:
        options = base.replace(precision=precision, attention=attention, decoder=DIFFUSION_DECODER)
        model, tokenizer = load_model(model_path, options, device)
        env = json.dumps(numerical_env(model) | {"options": options.record(), "sampling": cfg}, sort_keys=True)
        with sdpa_backends() as used:  # the cell's SDPA kernels, for its rows' env
            if precision in precisions and attention in attentions:
                tv_rows += measure_tv(model, tokenizer, name, tv_prompts, options, cfg, env)
            if ts["enabled"] and (precision, attention) == test_cell:
                test_rows += measure_two_sample(model, tokenizer, name, test_prompts, options, cfg, env)
        for r in tv_rows + test_rows:
            r["env"] = with_sdpa(env, used) if r["env"] == env else r["env"]  # this cell's rows
    return pd.DataFrame(tv_rows, columns=SAMPLING_TV_ROWS), pd.DataFrame(test_rows, columns=SAMPLING_TEST_ROWS)


def main(argv=None) -> int:
    from orthrus.audit.sampling_tables import fig_sampling_tv, tv_table, two_sample_table
    from orthrus.data.prompt_set import read_prompt_set
    from orthrus.io import save_figure, write_parquet, write_table
    from orthrus.options import DecodeOptions

    ap = argparse.ArgumentParser(prog="orthrus sampling", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="the analytic TV and the two-sample test on one Orthrus model")
    m.add_argument("--model-path", required=True, help="an Orthrus checkpoint")
    m.add_argument("--model-name", required=True)
    m.add_argument("--prompts", required=True)
    m.add_argument("--options", required=True, help="the study's DecodeOptions JSON (decode.*) the cells vary")
    m.add_argument("--config", required=True, help="the validated `sampling` config section as JSON")
    m.add_argument("--precisions", nargs="+", default=["bf16", "fp32"])
    m.add_argument("--attentions", nargs="+", default=["sdpa"])
    m.add_argument("--device", default="cpu")
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--out-tv", required=True)
    m.add_argument("--out-two-sample", required=True)
    pl = sub.add_parser("plan", help="the known-probability test's power against the planted control, per domain")
    for a in ("--model-path", "--prompts", "--options", "--config", "--out"):
        pl.add_argument(a, required=True)
    pl.add_argument("--device", default="cpu")
    t = sub.add_parser(
        "table", help="summarise measurements into sampling_tv.csv, sampling_two_sample.csv and a figure"
    )
    t.add_argument("--tv", nargs="+", required=True)
    t.add_argument("--two-sample", nargs="+", required=True)
    t.add_argument("--length", type=int, default=128, help="the study's response length, for bound_at_length")
    t.add_argument("--alpha", type=float, default=0.05)
    t.add_argument("--out-tv", required=True)
    t.add_argument("--out-two-sample", required=True)
    t.add_argument("--figure", required=True, help="the figure's path without extension")
    args = ap.parse_args(argv)
    if args.command == "plan":  # sampling.two_sample's setting, on the first prompt of every domain
        from orthrus.audit.known_p import plan_table
        from orthrus.data.prompt_set import first_per_domain
        from orthrus.models.loading import load_model

        cfg = json.loads(args.config)
        ts = cfg["two_sample"] | {"seed": cfg["seed"]}
        options = DecodeOptions.from_json(args.options).replace(
            precision=ts["precision"], temperature=float(ts["temperature"]), top_p=ts["top_p"], top_k=ts["top_k"]
        )
        options = options.replace(decoder=DIFFUSION_DECODER, max_new_tokens=ts["m"])
        model, tokenizer = load_model(args.model_path, options, args.device)
        prompts = first_per_domain(read_prompt_set(args.prompts), 1)
        write_table(pd.DataFrame(plan_table(model, tokenizer, prompts, options, ts)), args.out)
        return 0
    if args.command == "measure":
        try:
            cfg = json.loads(args.config)
        except json.JSONDecodeError as e:
            raise InputError(f"--config is not valid JSON ({e})") from None
        torch.set_num_threads(args.threads)
        tv, test = measure(
            args.model_path,
            args.model_name,
            read_prompt_set(args.prompts),
            DecodeOptions.from_json(args.options),
            cfg,
            args.precisions,
            args.attentions,
            args.device,
        )
        write_parquet(args.out_tv, tv)
        write_parquet(args.out_two_sample, test)
        print(f"[sampling] {args.model_name}: {len(tv)} trajectories, {len(test)} two-sample tests", file=sys.stderr)
        return 0
    tv = tv_table(pd.concat([pd.read_parquet(f) for f in args.tv], ignore_index=True), args.length)
    test = two_sample_table(pd.concat([pd.read_parquet(f) for f in args.two_sample], ignore_index=True), args.alpha)
    write_table(tv, args.out_tv)
    write_table(test, args.out_two_sample)
    save_figure(fig_sampling_tv(tv), args.figure)
    return 0
