"""`orthrus summary`: a run's results section, and the pages that quote results, written from tables.

    orthrus summary --tables results/tables      # print a run's results section (Markdown)
    orthrus summary --docs docs [--check]        # render README.md and docs/*.md from docs/src/

A page that quotes results (README.md, docs/NAME.md) is its template `docs/src/NAME.md` (Jinja2) rendered
from the committed tables under docs/; `--check` exits 1 where a page differs from its rendering. In it:

- `{{ name }}`: a named value of `docs/src/values.yaml`, `TABLE COLUMN [AGG] [CONDITION ...] [:FORMAT]`:
  the column of the one row the conditions (KEY=VALUE, KEY!=VALUE, KEY~REGEX) select, or AGG (min, max,
  sum, mean, count) of the rows they select, in Python's FORMAT; TABLE is a path under docs/.
- `{{ table(TABLE, {HEADER: CELL, ...}, CONDITION, ...) }}`: a Markdown table, a row per row selected,
  each CELL a `str.format` string over the row (`{match_rate:.3f}`; no number: an empty cell).
- `{{ results(RUN) }}`, `{{ claims(RUN) }}`: a run's results section or claims table; `{{ zoo(RECORD) }}`.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import string
import sys
import textwrap
from pathlib import Path

import jinja2
import jinja2.meta
import pandas as pd
import yaml

from orthrus import decoders
from orthrus.io import atomic_path
from orthrus.zoo import record

AGGREGATES = ("min", "max", "sum", "mean", "count")
VALUES = "values.yaml"  # the named values, beside the templates
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
    out += _by_domain(tables, orth, models, prec, att)
    out += _divergence_and_ppl(ppl, logit, models, prec, att)
    out += _forensics(tables, prec, att)
    out += _tpf(tpf, models)
    out += _benchmarks(tables)
    return _wrap(out)


def _wrap(lines: list[str]) -> str:
    """The section's prose wrapped to 110 columns, a list item's lines indented under it; tables whole."""
    return "".join(
        f"{line}\n"
        if line.startswith("|")
        else textwrap.fill(line, 110, subsequent_indent="  " * line.startswith("- "), break_on_hyphens=False) + "\n"
        for line in "\n".join(lines).split("\n")
    )


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
    if not (tables / "decoders.csv").exists() or _read(tables, "decoders.csv")["decoder"].nunique() < 2:
        return []
    cells = {"precision": "{precision}", "attention": "{attention}", "decoder": "{decoder} ({model})",
             "match": "{match_rate:.2f} [{ci_low:.2f}, {ci_high:.2f}]", "TPF": "{tpf_verify:.2f}",
             "oracle": "{oracle_match_rate:.2f}", "batched": "{batch_match_rate:.2f}",
             "verdicts": "{n_tie:d} / {n_rounding:d} / {n_structural:d} / {n_no_verdict:d}", "audit": "{audit}"}  # fmt: skip
    return [
        "\nHow lossless is each speculative decoder (`decoders.csv`): match rate with the AR reference "
        "[Wilson 95% CI], tokens per forward of the verified model, the controls' match rates in the same "
        "cell (the oracle: the verify shape alone; batched: the reference's noise floor in batches), and "
        "the verdicts of the first divergences (tie / rounding / structural / none):\n",
        table(tables, "decoders.csv", cells),
    ]


def _by_domain(tables, orth, models, prec, att) -> list[str]:
    """Table 4 beside the teacher's uncertainty."""
    by_domain, unc = _read(tables, "match_by_domain.csv"), _read(tables, "uncertainty_by_domain.csv")
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


def _forensics(tables: Path, prec: str, att: str) -> list[str]:
    """Where the bits part (forensics) and how far plain AR moves with precision (pairwise)."""
    pw = _read(tables, "pairwise_match.csv")
    ar = pw[pw["a_decoder"].isin(REFERENCE) & pw["b_decoder"].isin(REFERENCE) & (pw["b_precision"] == "fp32")]
    ar = ar[(ar["a_precision"] == prec) & (ar["a_attention"] == att) & (ar["b_attention"] == att)]
    cells = {"model": "{model}", "divergences": "{n_divergences:d}", "median margin (own precision)":
             "{median_margin_native:.3f}", "median margin (fp32)": "{median_margin_fp32:.3f}", "near-tie share":
             "{frac_near_tie:.2f}", "exact-tie share": "{frac_exact_tie:.2f}", "first differing layer (mode)":
             "{mode_first_layer}"}  # fmt: skip
    where = ["decoder~" + "|".join(map(re.escape, ORTHRUS)), f"precision={prec}", f"attention={att}"]
    out = []
    if len(_rows(tables, "forensics.csv", where)):
        out += [
            f"\nAt the first divergence, {prec} with {att} (`forensics.csv`):\n",
            table(tables, "forensics.csv", cells, *where),
        ]
    if len(ar):
        out.append(
            f"\nPlain AR decoding in {prec} ({att}) matches AR in fp32 on "
            f"{_f(float(ar['match_rate'].iloc[0]))} of prompts (`pairwise_match.csv`)."
        )
    return out


def _tpf(tpf, models) -> list[str]:
    """Table 2 (fp32: the trajectories are the reference's)."""
    t = tpf[(tpf["precision"] == "fp32")]
    if not len(t):
        return []
    # the first attention every model ran (one narrowed by decode.grids may lack some)
    every = [a for a in sorted(t["attention"].unique()) if set(models) <= set(t.loc[t["attention"] == a, "model"])]
    a0 = (every or sorted(t["attention"].unique()))[0]
    t = t[t["attention"] == a0]
    cols = [c for c in ("tpf_verify", "tpf_authors") if c in t.columns]
    out = [f"\nTokens per forward, fp32, {a0} (Table 2; `tpf_verify` counts prefill and verify forwards):\n"]
    out += ["| domain | " + " | ".join(f"{m} {c}" for m in models for c in cols) + " |"]
    out += ["|---|" + "---|" * (len(models) * len(cols))]
    for dom in sorted(t["domain"].unique(), key=lambda d: (d == "all", d)):
        r = t[t["domain"] == dom].set_index("model")
        name = f"**{dom}**" if dom == "all" else dom
        out.append(f"| {name} | " + " | ".join(_f(r[c].get(m, math.nan)) for m in models for c in cols) + " |")
    return out


def _benchmarks(tables: Path) -> list[str]:
    """Table 7."""
    b = _read(tables, "benchmarks.csv") if (tables / "benchmarks.csv").exists() else pd.DataFrame()
    b = b[b["primary"].astype(bool)] if "primary" in b.columns else b
    if not len(b):
        return []
    b = b.assign(run=b["model"] + " " + b["decoder"] + " " + b["precision"])
    runs = list(dict.fromkeys(b.sort_values(["model", "decoder", "precision"])["run"]))
    out = ["\nTiny benchmarks (Table 7; primary metric per task, lm-evaluation-harness):\n"]
    out += ["| task | metric | " + " | ".join(runs) + " |", "|---|---|" + "---|" * len(runs)]
    for (task, metric), g in b.groupby(["task", "metric"], sort=True):
        v = g.set_index("run")["value"]
        out.append(f"| {task} | {metric} | " + " | ".join(_f(v.get(r, math.nan)) for r in runs) + " |")
    return out


def target(source: Path) -> Path:
    """Where a template renders: docs/src/README.md to the repository's README.md, docs/src/X.md to docs/X.md."""
    return source.parents[2 if source.name == "README.md" else 1] / source.name


def _rows(docs: Path, name: str, conditions) -> pd.DataFrame:
    t = _read(docs, name)
    for cond in conditions:
        match = re.fullmatch(r"([^=!~]+)(!=|=|~)(.*)", cond, re.S)  # KEY=VALUE, KEY!=VALUE, KEY~REGEX
        if not match or match[1] not in t.columns:
            raise ValueError(f"{name}: {cond!r} is no KEY=VALUE, KEY!=VALUE or KEY~REGEX over its columns")
        key, op, want = match.groups()
        col = t[key].astype(str)
        keep = col.str.fullmatch(want) if op == "~" else col == want
        t = t[~keep if op == "!=" else keep]
    return t


def value(spec: str, docs: Path) -> str:
    """One named value: `spec` is `TABLE COLUMN [AGG] [CONDITION ...] [:FORMAT]`, TABLE under `docs`."""
    name, column, *rest = shlex.split(spec)
    fmt = next((r[1:] for r in rest if r.startswith(":")), None)
    agg = [r for r in rest if r in AGGREGATES]
    t = _rows(docs, name, [r for r in rest if not r.startswith(":") and r not in AGGREGATES])
    if agg and (len(t) or agg[0] == "count"):
        x = len(t) if agg[0] == "count" else getattr(t[column], agg[0])()
    elif len(t) != 1 or agg:
        raise ValueError(f"{spec!r} selects {len(t)} rows of {docs / name}, not one")
    else:
        x = t[column].iloc[0]
    if fmt and fmt.endswith("d") and float(x).is_integer():  # a count in a column pandas read as float
        x = int(x)
    return format(x, fmt) if fmt else str(x)


class _Cells(string.Formatter):  # a table's cells: no number is an empty cell, a count read as float an int
    def format_field(self, x, spec):
        if isinstance(x, float) and math.isnan(x):
            return ""
        return super().format_field(int(x) if spec.endswith("d") and isinstance(x, float) else x, spec)


def table(docs: Path, name: str, columns: dict, *conditions: str) -> str:
    """A whole Markdown table of `docs/name`: the rows `conditions` select, a column per `columns` item."""
    t = _rows(docs, name, conditions)
    if not len(t):
        raise ValueError(f"table({name!r}, ..., {', '.join(map(repr, conditions))}) selects no rows")
    cells = _Cells()
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(cells.format(c, **r) for c in columns.values()) + " |" for r in t.to_dict("records")]
    return "\n".join(out)


def render_page(source: Path) -> str:
    """The page `source` (docs/src/NAME.md) renders to, from the committed tables under docs/."""
    docs = source.parent.parent
    specs = yaml.safe_load((source.parent / VALUES).read_text()) or {}
    functions = {
        "table": lambda name, columns, *conditions: table(docs, name, columns, *conditions),
        "results": lambda run: render(docs / run).rstrip("\n"),
        "claims": lambda run: _wrap(_claims(docs / run)).rstrip("\n"),
        "zoo": lambda path: record.markdown(pd.read_csv(docs / path)),
    }
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    text = source.read_text()
    names = jinja2.meta.find_undeclared_variables(env.parse(text)) - functions.keys()
    if names - specs.keys():
        raise ValueError(f"{source}: no value named {', '.join(sorted(names - specs.keys()))} in {VALUES}")
    head = f"<!-- rendered from docs/src/{source.name} by `orthrus summary --docs docs`: edit that -->\n"
    return head + env.from_string(text).render(**{n: value(specs[n], docs) for n in names}, **functions)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus summary", description=__doc__.split("\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--tables", type=Path, help="print this run's results section")
    what.add_argument("--docs", type=Path, help="render DOCS/src/*.md into DOCS/*.md and README.md")
    ap.add_argument("--check", action="store_true", help="with --docs: exit 1 if a page differs, writing none")
    args = ap.parse_args(argv)
    if args.tables:
        sys.stdout.write(render(args.tables))
        return 0
    sources = sorted((args.docs / "src").glob("*.md"))
    if not sources:
        raise FileNotFoundError(f"no templates {args.docs / 'src'}/*.md")
    stale = [(target(s), render_page(s)) for s in sources]
    stale = [(page, new) for page, new in stale if not page.exists() or page.read_text() != new]
    for page, new in stale:
        if args.check:
            sys.stderr.write(f"{page}: not its template rendered (edit docs/src/{page.name}, run orthrus summary)\n")
        else:
            with atomic_path(page) as tmp:
                tmp.write_text(new)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
