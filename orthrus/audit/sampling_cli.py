"""`orthrus sampling measure | plan | table`: the command line of the sampling audit
(orthrus/audit/sampling.py measures, known_p.py plans, sampling_tables.py summarises)."""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch

from orthrus.audit.sampling import measure
from orthrus.audit.settings import SampledAudit
from orthrus.config import read_section
from orthrus.decoders import DIFFUSION_DECODER


def _settings(text: str) -> SampledAudit:
    return read_section(SampledAudit, text, "--config (the sampling section)")


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
    m.add_argument("--config", required=True, help="the `sampling` section's own keys as JSON (audit/settings.py)")
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

        cfg = _settings(args.config)
        ts = cfg.two_sample
        options = DecodeOptions.from_json(args.options).replace(
            precision=ts.precision, temperature=float(ts.temperature), top_p=ts.top_p, top_k=ts.top_k
        )
        options = options.replace(decoder=DIFFUSION_DECODER, max_new_tokens=ts.m)
        model, tokenizer = load_model(args.model_path, options, args.device)
        prompts = first_per_domain(read_prompt_set(args.prompts), 1)
        write_table(pd.DataFrame(plan_table(model, tokenizer, prompts, options, ts, cfg.seed)), args.out)
        return 0
    if args.command == "measure":
        cfg = _settings(args.config)
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
