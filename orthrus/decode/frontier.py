"""The price of exactness: each setting that could restore the AR trajectory, timed side by side.

`orthrus frontier measure --model-path DIR --model-name NAME --prompts eval.parquet --options JSON
 [--prompts-per-domain N] [--precisions P...] [--attentions A...] [--guards TAU...] [--device D] --out F.parquet`
decodes the first N prompts of every domain with the Orthrus loop in each setting: every
(precision, attention) cell, and the options' own cell (the base, where bf16 diverges) with the
guarded verify at each TAU (`DecodeOptions.verify_guard`). Each trajectory is compared with the
model's own AR view in the same cell (the same weights, one token per forward: the reference's
query shape). The prompts are interleaved over the settings (prompt 1 in every setting, then
prompt 2, ...), so a change in the machine's load during the job falls on all settings alike;
only the loop's own forwards are timed. One row per (setting, prompt), with the numerical
environment of its cell.

`orthrus frontier table --inputs F.parquet... --out exactness_cost.csv --figure STEM` writes one
row per setting: the match rate with its Wilson interval, tokens per forward (prefill and
verify), the wall time per token and its ratio to the unguarded base loop (the median over the
prompts of the ratio on each prompt), whether the setting
was exact on these prompts, and which exact setting was cheapest.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

import pandas as pd

from orthrus.contracts import ERRORS, EXACTNESS_COST_COLUMNS, FRONTIER_COLUMNS
from orthrus.decode.trajectory import Trajectory
from orthrus.decoders import DIFFUSION_DECODER
from orthrus.options import DecodeOptions
from orthrus.stats import wilson_ci

SETTING = ["model", "precision", "attention", "verify_guard"]
# the settings measured (config `frontier.*`, whose schema defaults are generated from these)
DEFAULTS = {
    "prompts_per_domain": 1,
    "precisions": ["bf16", "fp16", "fp32"],
    "attentions": ["eager", "sdpa"],
    "guards": [0.125, 0.5],
}
BASE = {"precision": "bf16", "attention": "sdpa"}  # the cell where bf16 diverges on CPU


def settings(base: DecodeOptions, precisions, attentions, guards) -> list[DecodeOptions]:
    """Every (precision, attention) cell unguarded, then the base cell at each guard."""
    cells = [base.replace(precision=p, attention=a, verify_guard=0.0) for p in precisions for a in attentions]
    return cells + [base.replace(verify_guard=float(g)) for g in guards if g > 0]


def measure(
    model_path: str, model_name: str, prompts: pd.DataFrame, cells: list[DecodeOptions], device: str = "cpu"
) -> pd.DataFrame:
    import torch

    from orthrus.chat import render_chat
    from orthrus.decode.loop import generate
    from orthrus.models.loading import load_model
    from orthrus.models.precision import numerical_env, sdpa_backends, with_sdpa

    loaded, sdpa = {}, {}
    for o in cells:  # one model per (precision, attention); the guards share the base cell's
        if (o.precision, o.attention) not in loaded:
            model, tokenizer = load_model(model_path, o, device)
            loaded[o.precision, o.attention] = model, tokenizer, json.dumps(numerical_env(model), sort_keys=True)
    rows = []
    for p in prompts.itertuples():
        ar = {}  # the AR view's trajectory per cell, once for the guards that share it
        for o in cells:
            model, tokenizer, env = loaded[o.precision, o.attention]
            ids = torch.tensor(render_chat(tokenizer, p.prompt, o.message), dtype=torch.long, device=model.device)
            with sdpa_backends() as used:  # the cell's SDPA kernels, for its rows' env
                if (o.precision, o.attention) not in ar:
                    ar[o.precision, o.attention] = generate(
                        model, ids, o.replace(decoder="ar", verify_guard=0.0)
                    ).tokens.tolist()
                ref = ar[o.precision, o.attention]
                t0 = time.perf_counter()
                out = generate(model, ids, o)
                seconds = time.perf_counter() - t0
            sdpa.setdefault((o.precision, o.attention), Counter()).update(used)
            t = Trajectory.from_loop(out.tokens.tolist(), out.stats)
            rows.append(
                t.columns()
                | {
                    "model": model_name,
                    "precision": o.precision,
                    "attention": o.attention,
                    "verify_guard": o.verify_guard,
                    "prompt_id": p.prompt_id,
                    "domain": p.domain,
                    "ar_tokens": ref,
                    "match": t.tokens == ref,
                    "seconds": seconds,  # the whole call's, timed here
                    "env": env,
                }
            )
    for r in rows:
        r["env"] = with_sdpa(r["env"], sdpa[r["precision"], r["attention"]])
    return pd.DataFrame(rows, columns=FRONTIER_COLUMNS)


def table(rows: pd.DataFrame, base: tuple[str, str]) -> pd.DataFrame:
    """One row per setting (the `measure` rows of every model); times relative to the model's
    unguarded loop in the `base` (precision, attention) cell."""
    out = []
    for key, g in rows.groupby(SETTING, sort=False):
        n, k = len(g), int(g["match"].sum())
        tokens = int(g["tokens"].map(len).sum())
        low, high = wilson_ci(k, n)
        out.append(
            dict(zip(SETTING, key))
            | {
                "n": n,
                "n_match": k,
                "match_rate": k / n,
                "ci_low": low,
                "ci_high": high,
                "tpf_verify": tokens / max(1, int((g["n_prefill"] + g["n_verify"]).sum())),
                "seconds_per_token": float(g["seconds"].sum()) / max(1, tokens),
            }
        )
    df = pd.DataFrame(out, columns=EXACTNESS_COST_COLUMNS)
    if df.empty:
        return df
    rate = rows.assign(per_token=rows["seconds"] / rows["tokens"].map(len).clip(lower=1))
    is_base = (rate["precision"] == base[0]) & (rate["attention"] == base[1]) & (rate["verify_guard"] == 0)
    base_rate = rate[is_base].set_index(["model", "prompt_id"])["per_token"]
    missing = sorted(set(df["model"]) - set(base_rate.index.get_level_values("model")))
    if missing:
        raise ValueError(f"no unguarded {base[0]}/{base[1]} setting to time against for {', '.join(missing)}")
    # each prompt's time per token against the base loop's on the same prompt, run just before or
    # after it; the median over prompts, so a prompt that a change of the machine's load hit does not decide
    rate["ratio"] = (
        rate["per_token"].values / base_rate.reindex(pd.MultiIndex.from_frame(rate[["model", "prompt_id"]])).values
    )
    ratio = rate.groupby(SETTING, sort=False)["ratio"].median()
    df["time_vs_base"] = [float(ratio.loc[tuple(k)]) for k in df[SETTING].itertuples(index=False)]
    df["exact"] = df["n_match"] == df["n"]
    cheapest = df[df["exact"]].groupby("model")["time_vs_base"].idxmin()
    df["cheapest_exact"] = df.index.isin(cheapest.values)
    df[ERRORS] = 0  # every measured prompt is a row: the measurement has no error rows to leave out
    return df


def fig_exactness_cost(df: pd.DataFrame, base: tuple[str, str]):
    """Match rate (Wilson CI) against the time per token relative to the base loop, one point per
    setting; the cheapest exact one ringed."""
    from orthrus.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in df.itertuples():
        label = f"{r.precision}/{r.attention}" + (f" guard {r.verify_guard:g}" if r.verify_guard else "")
        err = [[max(0.0, r.match_rate - r.ci_low)], [max(0.0, r.ci_high - r.match_rate)]]
        ax.errorbar(
            r.time_vs_base,
            r.match_rate,
            yerr=err,
            fmt="o" if not r.verify_guard else "s",
            capsize=3,
            label=f"{r.model} {label}" if df["model"].nunique() > 1 else label,
        )
        if r.cheapest_exact:
            ax.scatter([r.time_vs_base], [r.match_rate], s=260, facecolors="none", edgecolors="k", zorder=3)
    ax.axvline(1.0, color="0.7", lw=0.8, ls="--")
    ax.set_xlabel(f"wall time per token / unguarded {base[0]} {base[1]} loop")
    ax.set_ylabel("match rate vs the AR view (same cell)")
    n = int(df["n"].max()) if len(df) else 0
    ax.set_title(f"The price of exactness ({n} prompts per setting; ringed: cheapest exact)", fontsize=10)
    ax.set_ylim(-0.02, 1.05)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    from orthrus.data.prompt_set import first_per_domain, read_prompt_set
    from orthrus.io import save_figure, write_parquet, write_table

    ap = argparse.ArgumentParser(prog="orthrus frontier", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="decode a few prompts per domain in each setting, side by side")
    m.add_argument("--model-path", required=True, help="an Orthrus checkpoint")
    m.add_argument("--model-name", required=True)
    m.add_argument("--prompts", required=True)
    m.add_argument("--options", required=True, help="the base cell's DecodeOptions JSON (the study's decoding setting)")
    m.add_argument("--prompts-per-domain", type=int, default=DEFAULTS["prompts_per_domain"])
    m.add_argument("--precisions", nargs="+", default=DEFAULTS["precisions"])
    m.add_argument("--attentions", nargs="+", default=DEFAULTS["attentions"])
    m.add_argument("--guards", type=float, nargs="*", default=DEFAULTS["guards"])
    m.add_argument("--device", default="cpu")
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--out", required=True)
    t = sub.add_parser("table", help="the exactness-cost table and figure")
    t.add_argument("--inputs", nargs="+", required=True)
    t.add_argument(
        "--base", nargs=2, default=[BASE["precision"], BASE["attention"]], metavar=("PRECISION", "ATTENTION")
    )
    t.add_argument("--out", required=True)
    t.add_argument("--figure", help="figure stem (writes STEM.png and STEM.pdf)")
    args = ap.parse_args(argv)
    if args.command == "measure":
        import torch

        torch.set_num_threads(args.threads)
        base = DecodeOptions.from_json(args.options)
        if base.decoder != DIFFUSION_DECODER:
            ap.error(f"--options: the frontier measures the orthrus loop, got decoder {base.decoder!r}")
        if args.prompts_per_domain < 1:
            ap.error("--prompts-per-domain must be at least 1")
        prompts = first_per_domain(read_prompt_set(args.prompts), args.prompts_per_domain)
        cells = settings(base, args.precisions, args.attentions, args.guards)
        df = measure(args.model_path, args.model_name, prompts, cells, args.device)
        write_parquet(args.out, df)
        print(f"[frontier] {len(cells)} settings x {len(prompts)} prompts -> {args.out}", file=sys.stderr)
        return 0
    rows = pd.concat([pd.read_parquet(p) for p in args.inputs], ignore_index=True)
    df = table(rows, tuple(args.base))
    write_table(df, args.out)
    if args.figure:
        save_figure(fig_exactness_cost(df, tuple(args.base)), args.figure)
    shown = df.drop(columns=[ERRORS]).round(3)
    print(shown.to_string(index=False), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
