"""`orthrus lm-eval table`: the benchmark table (Table 7), the agreement of each non-AR run with
its AR reference, sample by sample, and the benchmark figure (`orthrus.report.figures.fig_benchmarks`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from orthrus.contracts import BENCHMARK_AGREEMENT_COLUMNS, BENCHMARK_COLUMNS, PRIMARY_METRICS
from orthrus.decoders import DECODER
from orthrus.io import save_figure, write_table
from orthrus.lmeval.tasks import BenchmarkError
from orthrus.stats import combined_stderr, paired_stderr


def _num(x):
    """A float; NaN for what is not a number (None, lm-eval's "N/A" stderr)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return x


def result_rows(rec: dict) -> list[dict]:
    """One benchmark-table row per task and metric of a `run` record."""
    rows = []
    for task, metrics in sorted((rec.get("results") or {}).items()):
        n = (rec.get("n_samples") or {}).get(task, {})
        n = n.get("effective", n.get("original")) if isinstance(n, dict) else n
        for key, value in sorted(metrics.items()):
            if "," not in key or "_stderr," in key:  # metrics are "name,filter"; skip alias, sample_len...
                continue
            name, _, filt = key.partition(",")
            stderr = metrics.get(f"{name}_stderr,{filt}")
            rows.append(
                {
                    "model": rec["model"],
                    "decoder": rec["decoder"],
                    "precision": rec["precision"],
                    "attention": rec["attention"],
                    "task": task,
                    "metric": key,
                    "value": _num(value),
                    "stderr": _num(stderr),
                    "n": n,
                    "primary": key in PRIMARY_METRICS.get(task, []),
                }
            )
    return rows


def _answer(filtered):
    """What the metric scored: the filtered text, or the chosen option of a multiple-choice doc."""
    if isinstance(filtered, list) and filtered and all(isinstance(r, list) and len(r) == 2 for r in filtered):
        lls = [_num(r[0]) for r in filtered]
        return max(range(len(lls)), key=lambda i: lls[i])
    if isinstance(filtered, list) and len(filtered) == 1:
        return filtered[0]
    return json.dumps(filtered, sort_keys=True)


def _response(resps):
    """The generated text of a sample; None when nothing was generated (a log-likelihood
    request's `resps` are scores, [[log-likelihood, is-greedy]] per choice, not a response)."""
    if isinstance(resps, list) and resps and isinstance(resps[0], list) and resps[0] and isinstance(resps[0][0], str):
        return resps[0][0]
    if isinstance(resps, str):
        return resps
    return None


def _n_responses_differ(a: dict, b: dict, common) -> int | None:
    """How many common samples got different generated text; None (NaN in the tables) for a
    task without generated responses (log-likelihood / multiple choice: there only the chosen
    answer, `n_answers_differ`, is compared; their log-likelihoods differ in the last bits
    between any two numerically different runs and say nothing about agreement)."""
    if any(a[d][0] is None or b[d][0] is None for d in common):
        return None
    return sum(a[d][0] != b[d][0] for d in common)


def _per_sample(rec: dict, task: str, metric: str) -> dict:
    """doc_id -> (response, answer, per-sample metric value) for one task/metric of one record."""
    name, _, filt = metric.partition(",")
    out = {}
    for s in (rec.get("samples") or {}).get(task, []):
        if filt and s.get("filter") not in (filt, None):
            continue
        out[s["doc_id"]] = (
            _response(s.get("resps")),
            _answer(s.get("filtered_resps")),
            (s.get("metrics") or {}).get(name),
        )
    return out


def _is_ar(rec: dict) -> bool:
    """An AR baseline: the reference or a model's own AR view (the decoder table's roles)."""
    return DECODER[rec["decoder"]].role in ("reference", "view")


def _find_reference(rec: dict, records: list[dict], reference_model: str | None):
    same = [
        r for r in records if _is_ar(r) and r["precision"] == rec["precision"] and r["attention"] == rec["attention"]
    ]
    for r in same:
        if r["model"] == rec["model"]:
            return r
    if reference_model:
        return next((r for r in same if r["model"] == reference_model), None)
    others = {r["model"] for r in same}
    return same[0] if len(others) == 1 else None


def agreement_rows(records: list[dict], reference_model: str | None = None) -> list[dict]:
    """Each non-AR run against its AR reference at the same precision and attention: the AR view
    of the same model if it was run, else `reference_model` (e.g. the teacher)."""
    rows = []
    for rec in records:
        if _is_ar(rec):
            continue
        ref = _find_reference(rec, records, reference_model)
        if ref is None:
            continue
        ref_rows = {(r["task"], r["metric"]): r for r in result_rows(ref)}
        for row in result_rows(rec):
            rr = ref_rows.get((row["task"], row["metric"]))
            if rr is not None:
                rows.append(_agreement_row(rec, ref, row, rr))
    return rows


def _agreement_row(rec: dict, ref: dict, row: dict, rr: dict) -> dict:
    """One task/metric of run `rec` (its table row `row`) against the reference `ref` (row `rr`)."""
    a, b = _per_sample(rec, row["task"], row["metric"]), _per_sample(ref, row["task"], row["metric"])
    common = sorted(set(a) & set(b), key=str)
    # the per-document scores of the same documents: their mean difference and its standard error
    # (NaN for a corpus-level metric such as chrF, whose per-sample values are not scores)
    x, y = [_num(a[d][2]) for d in common], [_num(b[d][2]) for d in common]
    paired = paired_stderr(x, y)
    diffs = [u - v for u, v in zip(x, y) if not (math.isnan(u) or math.isnan(v))]
    paired_diff = sum(diffs) / len(diffs) if diffs and not math.isnan(paired) else math.nan
    se, rse = row["stderr"], rr["stderr"]
    combined = combined_stderr(se, rse)
    diff = row["value"] - rr["value"]
    within = None if math.isnan(combined) else bool(abs(diff) <= combined + 1e-12)
    return {
        "model": rec["model"],
        "decoder": rec["decoder"],
        "reference_model": ref["model"],
        "reference_decoder": ref["decoder"],
        "precision": rec["precision"],
        "attention": rec["attention"],
        "task": row["task"],
        "metric": row["metric"],
        "n": len(common),
        "n_responses_differ": _n_responses_differ(a, b, common),
        "n_answers_differ": sum(a[d][1] != b[d][1] for d in common),
        "value": row["value"],
        "reference_value": rr["value"],
        "score_diff": diff,
        "stderr": se,
        "reference_stderr": rse,
        "combined_stderr": combined,
        "paired_diff": paired_diff,
        "paired_stderr": paired,
        "within_stderr": within,
    }


def load_records(paths) -> list[dict]:
    """The `run` records at `paths`; BenchmarkError for a file that is not one, or two for one run."""
    recs = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        for k in ("model", "decoder", "precision", "attention", "results"):
            if k not in rec:
                raise BenchmarkError(f"{p}: not an `orthrus lm-eval run` output (no {k!r})")
        recs.append(rec)
    keys = [(r["model"], r["decoder"], r["precision"], r["attention"]) for r in recs]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise BenchmarkError(f"several inputs for {sorted(dup)}")
    return recs


def make_tables(inputs, out, agreement_out=None, figure=None, reference_model=None) -> list[Path]:
    """Write the benchmark table, the agreement table (CSV + Markdown each) and the figure (PNG +
    PDF) from `run` records; returns the paths written."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from orthrus.report.figures import fig_benchmarks

    recs = load_records(inputs)
    rows = [r for rec in recs for r in result_rows(rec)]
    df = pd.DataFrame(rows, columns=BENCHMARK_COLUMNS)
    df = df.sort_values(["task", "metric", "model", "decoder", "precision", "attention"], kind="stable")
    out = Path(out)
    agreement_out = Path(agreement_out) if agreement_out else out.with_name(out.stem + "_agreement.csv")
    figure = figure or str(out.with_suffix(""))
    write_table(df, out)
    ag = pd.DataFrame(agreement_rows(recs, reference_model), columns=BENCHMARK_AGREEMENT_COLUMNS)
    write_table(ag, agreement_out)
    fig = fig_benchmarks(df)
    figs = save_figure(fig, figure)
    plt.close(fig)
    return [out, out.with_suffix(".md"), agreement_out, agreement_out.with_suffix(".md"), *figs]
