"""The load table, its claims and its figure (issue 54): a server run under load against the same server at
concurrency 1, with the verdicts of its divergences and the distinct completions over its repeats."""

import json

import pandas as pd
import pytest
from test_external import engine_run, export, ingest_cli, world, write

from orthrus import contracts
from orthrus.analysis import analyze
from orthrus.analysis.load import load_decode
from orthrus.analysis.load_invariance import load_table
from orthrus.io import write_table
from orthrus.report.claims import claims_table
from orthrus.report.claims.base import DEFAULT_SETTINGS
from orthrus.report.claims.load_invariance import load_invariant, planted_load_caught
from orthrus.report.figures import fig_load


def _served(plain, concurrency, planted=False, forks=(), varying=(), speculative="none"):
    """The plain records as a server run at `concurrency`: prompts `forks` changed at mid-response, and
    repeat 1 of prompts `varying` told apart from repeat 0 in extra.completions."""
    records = json.loads(json.dumps(plain))
    for i, r in enumerate(records):
        r["env"] |= {
            "api": "openai-completions",
            "server": "llamacpp",
            "concurrency": concurrency,
            "slots": concurrency,
            "repeats": 3,
            "planted": planted,
            "speculative": speculative,
        }
        if i in forks:
            q = len(r["token_ids"]) // 2
            r["token_ids"][q] = 40 if r["token_ids"][q] != 40 else 41
            r["text"] = None
        other = r["token_ids"][:-1] + [7]
        r["extra"] = {"completions": [r["token_ids"], other if i in varying else r["token_ids"], r["token_ids"]]}
    return records


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("load")
    teacher, prompts, ref = world(tmp_path)
    plain = engine_run(teacher, export(tmp_path, teacher, prompts))
    files = [ref]
    # the run at 1 is compared with the in-process reference, the runs at 4 with it; one engine run records
    # no concurrency (a file of another engine) and gets no row
    for name, records, reference in (
        ("srv-c1", _served(plain, 1), None),
        ("srv-c4", _served(plain, 4, forks={1}, varying={1, 2}), "srv-c1"),
        ("planted-c4", _served(plain, 4, planted=True, forks={0, 2, 3}), "srv-c1"),
        ("other", plain, None),
    ):
        rc, out = ingest_cli(tmp_path, teacher, prompts, write(tmp_path / f"{name}.jsonl", records), name, reference)
        assert rc == 0
        files.append(out)
    return tmp_path, files


def test_each_server_run_gets_its_row_against_concurrency_one_with_verdicts_and_distinct_completions(runs):
    tmp_path, files = runs
    tables = analyze(list(map(str, files)))
    load = tables["load.csv"]
    assert list(load.columns) == contracts.TABLES["load.csv"]
    by = load.set_index("model")
    assert set(by.index) == {"srv-c1", "srv-c4", "planted-c4"}  # `other` records no concurrency
    c1, c4, planted = by.loc["srv-c1"], by.loc["srv-c4"], by.loc["planted-c4"]
    assert (c1["reference"], c1["concurrency"], c1["match_rate"], c1["n_diverged"]) == ("teacher", 1, 1.0, 0)
    assert (c4["reference"], c4["concurrency"], c4["slots"], c4["n"], c4["n_diverged"]) == ("srv-c1", 4, 4, 4, 1)
    assert c4["match_rate"] == 0.75 and c4["ci_high"] < 1 and not c4["planted"] and planted["planted"]
    assert planted["n_diverged"] == 3 and planted["match_rate"] == 0.25
    # the repeats: two of four prompts got two completions at 4, none at 1
    assert (c4["distinct_mean"], c4["distinct_max"], c4["frac_varying"]) == (1.5, 2, 0.5)
    assert (c1["distinct_mean"], c1["distinct_max"], c1["frac_varying"]) == (1.0, 1, 0.0)
    # no forensics: every divergence counted without a verdict
    assert (c4["n_tie"], c4["n_structural"], c4["n_no_verdict"]) == (0, 0, 1)

    # the verdicts come from the forensics rows of the same configuration
    decode, _ = load_decode(list(map(str, files)))
    key = dict(model="planted-c4", decoder="external", precision="fp32", attention="eager")
    fx = pd.DataFrame([key | {"verdict": v} for v in ("structural", "structural", "tie")])
    row = load_table(tables["trajectories.parquet"], decode, fx).set_index("model").loc["planted-c4"]
    assert (row["n_tie"], row["n_rounding"], row["n_structural"], row["n_no_verdict"]) == (1, 0, 2, 0)


def test_the_claims_read_load_csv(tmp_path):
    base = {c: 0 for c in contracts.LOAD_COLUMNS} | {"decoder": "external", "precision": "fp32", "attention": "sdpa"}
    base |= {"server": "llamacpp", "method": "none", "reference": "a-c1", "slots": 4, "repeats": 3, "planted": False}
    base |= {"n": 10, "match_rate": 0.8, "ci_low": 0.5, "ci_high": 0.95, "first_divergence_median": 3.0}
    base |= {"distinct_mean": 1.2, "distinct_max": 2, "frac_varying": 0.2, contracts.ERRORS: 1}
    rows = [
        base | {"model": "a-c1", "concurrency": 1, "reference": "teacher", "match_rate": 1.0},
        base | {"model": "a-c4", "concurrency": 4, "n_diverged": 2, "n_tie": 1, "n_rounding": 1},
        base | {"model": "b-c4", "concurrency": 4, "n_diverged": 2, "n_tie": 1, "n_structural": 1},
        base | {"model": "c-c4", "concurrency": 4, "n_diverged": 1, "n_no_verdict": 1},
        base | {"model": "p-c4", "concurrency": 4, "planted": True, "n_diverged": 3, "n_structural": 3},
        base | {"model": "q-c4", "concurrency": 4, "planted": True, "n_diverged": 2, "n_rounding": 2},
        base | {"model": "r-c4", "concurrency": 4, "planted": True, "match_rate": 1.0},
    ]
    write_table(pd.DataFrame(rows, columns=contracts.TABLES["load.csv"]), tmp_path / "load.csv")
    inv = {r["subject"].split()[0]: r for r in load_invariant(tmp_path, DEFAULT_SETTINGS)}
    assert set(inv) == {"a-c4", "b-c4", "c-c4"}  # the run at 1 is the reference, the planted runs the control's
    assert [inv[m]["verdict"] for m in ("a-c4", "b-c4", "c-c4")] == ["holds", "fails", "fails"]
    assert "1 tie, 1 rounding, 0 structural" in inv["a-c4"]["reason"] and "1.20 distinct" in inv["a-c4"]["reason"]
    assert inv["a-c4"]["statistic"] == 0.8 and inv["a-c4"]["n_errors_excluded"] == 1
    planted = {r["subject"].split()[0]: r for r in planted_load_caught(tmp_path, DEFAULT_SETTINGS)}
    assert [planted[m]["verdict"] for m in ("p-c4", "q-c4", "r-c4")] == ["holds", "fails", "untestable"]
    assert planted["p-c4"]["statistic"] == 0.3

    # both claims in the registry; a study without servers has one untestable row each
    claims = claims_table(tmp_path)
    assert set(claims.loc[claims["source"] == "load.csv", "claim"]) == {"load-invariant", "planted-load-caught"}
    (tmp_path / "load.csv").unlink()
    for fn in (load_invariant, planted_load_caught):
        (row,) = fn(tmp_path, DEFAULT_SETTINGS)
        assert row["verdict"] == "untestable" and "concurrency" in row["reason"]


def test_the_load_figure_draws_the_runs_under_load_and_an_empty_panel_without(tmp_path):
    rows = pd.DataFrame(
        [
            {"model": f"v-c{c}", "server": "vllm", "method": "none", "precision": "fp32", "planted": False}
            | {"concurrency": c}
            | {"match_rate": r, "ci_low": r - 0.1, "ci_high": 1.0, "distinct_mean": d}
            for c, r, d in ((1, 1.0, 1.0), (4, 0.9, 1.1), (16, 0.8, 1.3))
        ]
    )
    fig = fig_load(rows)
    match_ax, distinct_ax = fig.axes[:2]
    (line,) = match_ax.get_lines()[:1]
    assert list(line.get_xdata()) == [4, 16]  # the run at 1 has another reference
    assert list(distinct_ax.get_lines()[0].get_xdata()) == [1, 4, 16]
    empty = fig_load(None)
    assert "no server runs" in empty.axes[0].texts[0].get_text()


def test_load_moves_the_servers_own_logprobs_where_it_changes_no_token():
    """logprob_moved_max / frac_logprob_moved: over the positions before each prompt's first divergence,
    the largest change of the emitted token's log-probability between the run and its reference, and the
    share of positions where it changed; NaN against a reference without the server's numbers."""
    from orthrus.analysis.load_invariance import logprob_moves

    cfg = {"decoder": "external", "precision": "fp32", "attention": "sdpa"}

    def row(model, pid, tokens, lps):
        top = [[[t, lp], [99, -9.0]] for t, lp in zip(tokens, lps)]
        return (
            {"model": model} | cfg | {"prompt_id": pid, "tokens": tokens, "env": json.dumps({"engine_logprobs": top})}
        )

    decode = pd.DataFrame(
        [
            row("s-c1", "p0", [5, 6, 7], [-0.1, -0.2, -0.3]),
            row("s-c4", "p0", [5, 6, 8], [-0.1, -0.25, -0.5]),  # forks at 2: only 0 and 1 count
            row("s-c1", "p1", [5, 6], [-0.1, -0.2]),
            row("s-c4", "p1", [5, 6], [-0.1, -0.2]),
        ]
    )
    run, ref = decode[decode.model == "s-c4"], decode[decode.model == "s-c1"]
    out = logprob_moves(run, ref, {"p0": 2, "p1": 2})
    assert out["logprob_moved_max"] == pytest.approx(0.05) and out["frac_logprob_moved"] == 0.25
    out = logprob_moves(run, None, {"p0": 2, "p1": 2})  # an in-process reference: no server numbers
    assert pd.isna(out["logprob_moved_max"]) and pd.isna(out["frac_logprob_moved"])
