"""`orthrus summary`: the numbers of README.md and docs/, written from a run's tables.

    orthrus summary --tables results/tables [--readme FILE.md ... [--check]]

Prints Markdown made only of numbers read from the tables (`orthrus analyze`, `orthrus
lm-eval table`), so the text and the results cannot drift apart. With `--readme` (once per file)
it rewrites what a file marks:

- the whole results section between `<!-- results:begin -->` and `<!-- results:end -->`;
- the claims table alone between `<!-- claims:begin -->` and `<!-- claims:end -->`;
- one number in the prose, `<!-- v TABLE COLUMN [AGG] [CONDITION ...] [:FORMAT] -->0.52<!-- /v -->`:
  the column of the one row the conditions (KEY=VALUE, KEY!=VALUE, KEY~REGEX) select, or AGG (min,
  max, sum, mean, count) of the rows they select, in Python's FORMAT (default: a float to 3 decimals). TABLE is the run's
  (`--tables`) when a bare name, a committed run's path relative to the document when it has a `/`
  (`engines/decoders.csv` in docs/ENGINES.md); a value with spaces is quoted.

With `--check` it only says whether every one is up to date (exit 1 if not).
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from pathlib import Path

import pandas as pd

from orthrus import decoders
from orthrus.io import atomic_path

# the blocks a document may hold: the whole results section (docs/RESULTS.md), or the claims
# table alone (the README's front page)
BLOCKS = {
    "results": ("<!-- results:begin -->", "<!-- results:end -->"),
    "claims": ("<!-- claims:begin -->", "<!-- claims:end -->"),
}
BEGIN, END = BLOCKS["results"]
VALUE = re.compile(r"<!-- v (?P<spec>[^>]*?) -->(?P<text>.*?)<!-- /v -->", re.S)
AGGREGATES = ("min", "max", "sum", "mean", "count")
CONDITION = re.compile(r"([^=!~]+)(!=|=|~)(.*)", re.S)  # KEY=VALUE, KEY!=VALUE, KEY~REGEX
REDUCED = ("bf16", "fp16")
# the decoder whose tables these are (the diffusion view's lossless speculative loop) and the
# trajectory every decoder is compared with
ORTHRUS = decoders.names(role="speculative", diffusion=True)
REFERENCE = decoders.names(role="reference")


def _read(tables: Path, name: str) -> pd.DataFrame:
    path = tables / name
    if not path.exists():
        raise FileNotFoundError(f"table {path} does not exist (run the study first)")
    return pd.read_csv(path)


def _f(x, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _p(x: float) -> str:
    return "n/a" if math.isnan(x) else (f"{x:.1e}" if x < 1e-3 else f"{x:.3f}")


def diverging_setting(overall: pd.DataFrame) -> tuple[str, str]:
    """(precision, attention) where reduced-precision Orthrus diverges most: the study's setting.
    Among the cells every model ran where there are such (a model narrowed by decode.grids runs
    fewer), so that the tables at that setting have every model."""
    d = overall[overall["decoder"].isin(ORTHRUS) & overall["precision"].isin(REDUCED)]
    n_models = d.groupby(["precision", "attention"])["model"].nunique()
    shared = n_models[n_models == overall.loc[overall["decoder"].isin(ORTHRUS), "model"].nunique()].index
    if len(shared):
        d = d.set_index(["precision", "attention"]).loc[shared].reset_index()
    worst = d.groupby(["precision", "attention"])["match_rate"].mean().idxmin()
    return str(worst[0]), str(worst[1])


def render(tables: Path) -> str:
    overall = _read(tables, "match_overall.csv")
    prec, att = diverging_setting(overall)
    # rows of the Orthrus decoder only, where a table also holds other decoders
    ppl, logit, tpf = (
        t[t["decoder"].isin(ORTHRUS)] if "decoder" in t.columns else t
        for t in (_read(tables, n) for n in ("ppl_by_match.csv", "ppl_logit.csv", "tpf_by_domain.csv"))
    )
    orth = overall[overall["decoder"].isin(ORTHRUS)]
    models = sorted(orth["model"].unique())
    out = _claims(tables)
    out += _match_grid(orth, models)
    out += _decoders(tables)
    out += _by_domain(
        _read(tables, "match_by_domain.csv"), _read(tables, "uncertainty_by_domain.csv"), orth, models, prec, att
    )
    out += _divergence_and_ppl(ppl, logit, models, prec, att)
    out += _forensics(_read(tables, "forensics.csv"), _read(tables, "pairwise_match.csv"), prec, att)
    out += _tpf(tpf, models)
    out += _benchmarks(tables)
    return "\n".join(out) + "\n"


def _claims(tables: Path) -> list[str]:
    """The study's verdict first (`claims.csv`; computed from the tables for a run that has none)."""
    from orthrus.report.claims import CLAIMS, load_or_compute

    df, computed = load_or_compute(tables)
    out = [
        "Each claim of the study tested on this run's tables (`claims.csv`"
        + (", computed from the tables by `orthrus claims`" if computed else "")
        + "; `orthrus compare-runs A B` compares two runs' verdicts):\n"
    ]
    out += [f"- `{c}`: {CLAIMS[c].description}" if c in CLAIMS else f"- `{c}`" for c in dict.fromkeys(df["claim"])]
    out += ["", "| claim | subject | statistic [interval] | p | verdict |", "|---|---|---|---|---|"]
    for r in df.itertuples():
        stat = (
            ""
            if pd.isna(r.statistic)
            else (
                f"{r.statistic_name} {_f(r.statistic, 3) if r.statistic == 0 or abs(r.statistic) >= 1e-3 else _p(r.statistic)}"
                + ("" if pd.isna(r.ci_low) else f" [{_f(r.ci_low, 3)}, {_f(r.ci_high, 3)}]")
            )
        )
        verdict = r.verdict + (
            f" ({r.reason})" if r.verdict != "holds" and isinstance(r.reason, str) and r.reason else ""
        )
        out.append(
            f"| {r.claim} | {r.subject} | {stat} | {'' if pd.isna(r.p_value) else '0' if r.p_value == 0 else _p(float(r.p_value))} "
            f"| {verdict} |"
        )
    out.append("")
    return out


def _match_grid(orth: pd.DataFrame, models: list) -> list[str]:
    """Tables 3 and 8: every precision x attention, models side by side; `-` for a model that did
    not run a cell (a narrower decode.grids grid), said below the table."""
    attentions = sorted(orth["attention"].unique())
    out = [
        f"Orthrus == AR reference, share of prompts ({' / '.join(models)}; n = {int(orth['n'].max())} prompts each):\n",
        "| precision | " + " | ".join(attentions) + " |",
        "|---|" + "---|" * len(attentions),
    ]
    narrowed = False
    for p in ("fp32", "fp16", "bf16"):
        cells = []
        for a in attentions:
            r = orth[(orth["precision"] == p) & (orth["attention"] == a)].set_index("model")["match_rate"]
            narrowed |= not r.empty and any(m not in r.index for m in models)
            cells.append("-" if r.empty else " / ".join(_f(r[m]) if m in r.index else "-" for m in models))
        if any(c != "-" for c in cells):
            out.append(f"| {p} | " + " | ".join(cells) + " |")
    if narrowed:
        out.append("\n`-`: no result in that cell (a model narrowed by `decode.grids` does not decode it).")
    return out


def _decoders(tables: Path) -> list[str]:
    """How lossless is each speculative decoder, beside the controls, with the audit's verdicts."""
    dec_path = tables / "decoders.csv"
    dec = pd.read_csv(dec_path) if dec_path.exists() else pd.DataFrame()
    if not len(dec) or dec["decoder"].nunique() < 2:
        return []
    out = [
        "\nHow lossless is each speculative decoder (`decoders.csv`): match rate with the AR reference "
        "[Wilson 95% CI], tokens per forward of the verified model, the controls' match rates in the same "
        "cell (the oracle: the verify shape alone; batched: the reference's noise floor in batches), and "
        "the verdicts of the first divergences (tie / rounding / structural / none):\n",
        "| precision | attention | decoder | match | TPF | oracle | batched | verdicts | audit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in dec.itertuples():
        verdicts = f"{r.n_tie} / {r.n_rounding} / {r.n_structural} / {r.n_no_verdict}"
        out.append(
            f"| {r.precision} | {r.attention} | {r.decoder} ({r.model}) | {_f(r.match_rate)} "
            f"[{_f(r.ci_low)}, {_f(r.ci_high)}] | {_f(r.tpf_verify)} | {_f(r.oracle_match_rate)} | "
            f"{_f(r.batch_match_rate)} | {verdicts} | {r.audit} |"
        )
    return out


def _by_domain(by_domain, unc, orth, models, prec, att) -> list[str]:
    """Table 4 beside the teacher's uncertainty."""
    sel = by_domain[
        by_domain["decoder"].isin(ORTHRUS) & (by_domain["precision"] == prec) & (by_domain["attention"] == att)
    ]
    out = [
        f"\nPer domain, {prec} with {att} (Table 4), beside the teacher's own uncertainty along its "
        f"greedy path (`uncertainty_by_domain.csv`: steps with a top-1/top-2 margin below "
        f"{_f(float(unc['near_tie_threshold'].iloc[0]), 3)}, as a share and per response), "
        f"domains ordered by near-ties per response:\n",
        "| domain | declared | near-tie share | near-ties per response | entropy | " + " | ".join(models) + " |",
        "|---|---|---|---|---|" + "---|" * len(models),
    ]
    u = unc.set_index("domain")
    for dom in u.sort_values("near_ties_per_prompt").index:
        rates = sel[sel["domain"] == dom].set_index("model")["match_rate"]
        if dom == "all":
            rates = orth[(orth["precision"] == prec) & (orth["attention"] == att)].set_index("model")["match_rate"]
        name = f"**{dom}**" if dom == "all" else dom
        out.append(
            f"| {name} | {u.loc[dom, 'declared'] if isinstance(u.loc[dom, 'declared'], str) else ''} | "
            f"{_f(u.loc[dom, 'near_tie_share'])} | {_f(u.loc[dom, 'near_ties_per_prompt'], 1)} | "
            f"{_f(u.loc[dom, 'mean_entropy'])} | " + " | ".join(_f(rates.get(m, math.nan)) for m in models) + " |"
        )
    return out


def _divergence_and_ppl(ppl, logit, models, prec, att) -> list[str]:
    """Tables 5/6 and the divergence counts."""
    out = [
        f"\nDivergence and perplexity, {prec} with {att} (Tables 5 and 6):\n",
        "| model | diverging | PPL matching | PPL diverging | beta1 [95% CI] | p |",
        "|---|---|---|---|---|---|",
    ]
    for m in models:
        g = ppl[(ppl["model"] == m) & (ppl["precision"] == prec) & (ppl["attention"] == att)].set_index("matched")
        lg = logit[(logit["model"] == m) & (logit["precision"] == prec) & (logit["attention"] == att)]
        lg = lg.iloc[0] if len(lg) else None
        n_div = int(g.loc[False, "n"]) if False in g.index else 0
        n_all = n_div + (int(g.loc[True, "n"]) if True in g.index else 0)
        beta = "n/a" if lg is None else f"{_f(lg['beta1'])} [{_f(lg['ci_low'])}, {_f(lg['ci_high'])}]"
        if lg is not None and lg.get("fit") == "firth":
            beta += " (Firth)"  # the plain fit separated: ppl_logit.csv's `fit`
        out.append(
            f"| {m} | {n_div} of {n_all} | {_f(g['mean_ppl'].get(True, math.nan), 3)} | "
            f"{_f(g['mean_ppl'].get(False, math.nan), 3)} | {beta} | "
            f"{'n/a' if lg is None else _p(float(lg['p_value']))} |"
        )
    return out


def _forensics(fx, pw, prec, att) -> list[str]:
    """Where the bits part (forensics) and how far plain AR moves with precision (pairwise)."""
    fx = fx[fx["decoder"].isin(ORTHRUS) & (fx["precision"] == prec) & (fx["attention"] == att)]
    ar = pw[
        pw["a_decoder"].isin(REFERENCE)
        & pw["b_decoder"].isin(REFERENCE)
        & (pw["a_precision"] == prec)
        & (pw["b_precision"] == "fp32")
        & (pw["a_attention"] == att)
        & (pw["b_attention"] == att)
    ]
    out = []
    if len(fx):
        out += [
            f"\nAt the first divergence, {prec} with {att} (`forensics.csv`):\n",
            "| model | divergences | median margin (own precision) | median margin (fp32) | "
            "near-tie share | exact-tie share | first differing layer (mode) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in fx.sort_values("model").itertuples():
            out.append(
                f"| {r.model} | {r.n_divergences} | {_f(r.median_margin_native, 3)} | "
                f"{_f(r.median_margin_fp32, 3)} | {_f(r.frac_near_tie)} | {_f(r.frac_exact_tie)} | "
                f"{r.mode_first_layer} |"
            )
    if len(ar):
        out.append(
            f"\nPlain AR decoding in {prec} ({att}) matches AR in fp32 on "
            f"{_f(float(ar['match_rate'].iloc[0]))} of prompts (`pairwise_match.csv`)."
        )
    return out


def _tpf(tpf, models) -> list[str]:
    """Table 2 (fp32: the trajectories are the reference's)."""
    out = []
    t = tpf[(tpf["precision"] == "fp32")]
    if len(t):
        # the first attention every model ran (one narrowed by decode.grids may lack some)
        every = [a for a in sorted(t["attention"].unique()) if set(models) <= set(t.loc[t["attention"] == a, "model"])]
        a0 = (every or sorted(t["attention"].unique()))[0]
        t = t[t["attention"] == a0]
        cols = [c for c in ("tpf_verify", "tpf_authors") if c in t.columns]
        out.append(f"\nTokens per forward, fp32, {a0} (Table 2; `tpf_verify` counts prefill and verify forwards):\n")
        out.append("| domain | " + " | ".join(f"{m} {c}" for m in models for c in cols) + " |")
        out.append("|---|" + "---|" * (len(models) * len(cols)))
        for dom in sorted(t["domain"].unique(), key=lambda d: (d == "all", d)):
            r = t[t["domain"] == dom].set_index("model")
            name = f"**{dom}**" if dom == "all" else dom
            out.append(f"| {name} | " + " | ".join(_f(r[c].get(m, math.nan)) for m in models for c in cols) + " |")
    return out


def _benchmarks(tables: Path) -> list[str]:
    """Table 7."""
    out = []
    bpath = tables / "benchmarks.csv"
    if bpath.exists():
        b = pd.read_csv(bpath)
        b = b[b["primary"].astype(bool)] if "primary" in b.columns else b
        if len(b):
            b = b.assign(run=b["model"] + " " + b["decoder"] + " " + b["precision"])
            runs = list(dict.fromkeys(b.sort_values(["model", "decoder", "precision"])["run"]))
            out.append("\nTiny benchmarks (Table 7; primary metric per task, lm-evaluation-harness):\n")
            out.append("| task | metric | " + " | ".join(runs) + " |")
            out.append("|---|---|" + "---|" * len(runs))
            for (task, metric), g in b.groupby(["task", "metric"], sort=True):
                v = g.set_index("run")["value"]
                out.append(f"| {task} | {metric} | " + " | ".join(_f(v.get(r, math.nan)) for r in runs) + " |")
    return out


def render_claims(tables: Path) -> str:
    """The claims table alone, as the results section begins."""
    return "\n".join(_claims(tables)).rstrip("\n") + "\n"


def replace_block(text: str, block: str, name: str = "results") -> str:
    begin, end = BLOCKS[name]
    if begin not in text or end not in text:
        raise ValueError(f"the document has no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{block}{end}{tail}"


def value(spec: str, tables: Path, base: Path) -> str:
    """One number of the prose: `spec` is a value marker's `TABLE COLUMN [AGG] [KEY=VALUE ...] [:FORMAT]`."""
    table, column, *rest = shlex.split(spec)
    path = base / table if "/" in table else tables / table
    t = _read(path.parent, path.name)
    fmt = next((r[1:] for r in rest if r.startswith(":")), None)
    agg = [r for r in rest if r in AGGREGATES]
    for cond in (r for r in rest if not r.startswith(":") and CONDITION.fullmatch(r)):
        key, op, want = CONDITION.fullmatch(cond).groups()
        col = t[key].astype(str)
        keep = col.str.fullmatch(want) if op == "~" else col == want
        t = t[~keep if op == "!=" else keep]
    if agg and (len(t) or agg[0] == "count"):
        x = len(t) if agg[0] == "count" else getattr(t[column], agg[0])()
    elif len(t) != 1 or agg:
        raise ValueError(f"<!-- v {spec} --> selects {len(t)} rows of {path}, not one")
    else:
        x = t[column].iloc[0]
    if fmt is None and isinstance(x, float):
        fmt = ".3f"
    elif fmt and fmt.endswith("d") and float(x).is_integer():  # a count in a column pandas read as float
        x = int(x)
    return format(x, fmt) if fmt else str(x)


def update(text: str, tables: Path, base: Path = Path(".")) -> str:
    """`text` with each block and value it holds rendered from `tables` (and, for a value naming a
    path, from that table relative to `base`, the document's folder); an error when it holds none."""
    renderers = {"results": render, "claims": render_claims}
    present = [name for name, (begin, end) in BLOCKS.items() if begin in text and end in text]
    if not present and not VALUE.search(text):
        raise ValueError(
            "the document has none of the blocks " + ", ".join(b for b, _ in BLOCKS.values()) + " nor a value"
        )
    for name in present:
        text = replace_block(text, renderers[name](tables), name)
    return VALUE.sub(lambda m: f"<!-- v {m['spec']} -->{value(m['spec'], tables, base)}<!-- /v -->", text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus summary", description=__doc__.split("\n")[0])
    ap.add_argument("--tables", required=True, type=Path)
    ap.add_argument("--readme", type=Path, action="append", help="rewrite this file's blocks (repeatable)")
    ap.add_argument("--check", action="store_true", help="with --readme: exit 1 if a block is stale")
    args = ap.parse_args(argv)
    if not args.readme:
        sys.stdout.write(render(args.tables))
        return 0
    stale = []
    for path in args.readme:
        text = path.read_text()
        new = update(text, args.tables, path.parent)
        if new == text:
            continue
        if args.check:
            stale.append(path)
        else:
            with atomic_path(path) as tmp:
                tmp.write_text(new)
    for path in stale:
        sys.stderr.write(
            f"{path}: a rendered block or value differs from {args.tables} "
            f"(run `orthrus summary --tables {args.tables} --readme {path}`)\n"
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
