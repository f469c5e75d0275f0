"""benchmarks/seed_spread.py: each claim's statistic across finished runs (seeds) and its spread."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("seed_spread", ROOT / "benchmarks" / "seed_spread.py")
seed_spread = importlib.util.module_from_spec(spec)
spec.loader.exec_module(seed_spread)


def _seed(tmp_path, name, shift, layout="tables") -> Path:
    """The committed run as seed `name` might give it: bf16 sdpa match rates moved by `shift`."""
    run = tmp_path / name
    tables = run / "results" / "tables" if layout == "run" else run
    shutil.copytree(ROOT / "docs" / "results", tables)
    for f in ("claims.csv", "claims.md"):  # the tables change: the claims are computed from them
        (tables / f).unlink(missing_ok=True)
    mo = pd.read_csv(tables / "match_overall.csv")
    bf = (mo.precision == "bf16") & (mo.attention == "sdpa")
    mo.loc[bf, ["match_rate", "ci_low", "ci_high"]] += shift
    mo.to_csv(tables / "match_overall.csv", index=False)
    return run


def test_spread_of_each_claim_across_seeds(tmp_path, capsys):
    a, b = _seed(tmp_path, "seed-0", 0.0), _seed(tmp_path, "seed-1", -0.05, layout="run")
    t = seed_spread.spread([seed_spread.parse_run(str(a)), seed_spread.parse_run(str(b))])
    r = t[(t.claim == "bf16-inexact") & (t.subject == "ce-k8/orthrus/bf16")].iloc[0]
    mo = pd.read_csv(ROOT / "docs" / "results" / "match_overall.csv").set_index(
        ["model", "decoder", "precision", "attention"]
    )
    committed = mo.loc[("ce-k8", "orthrus", "bf16", "sdpa"), "match_rate"]
    assert r["seed-0"] == pytest.approx(committed) and r["seed-1"] == pytest.approx(committed - 0.05)
    assert r["spread"] == pytest.approx(0.05) and r["verdicts"] == "holds 2/2" and r["agree"]
    assert seed_spread.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "2 runs" in out and "0 with differing verdicts" in out and "seed-1" in out
    # a seed on which bf16 sdpa Orthrus matched everywhere: the claim's verdict differs
    c = _seed(tmp_path, "seed-2", 0.0)
    mo = pd.read_csv(c / "match_overall.csv")
    mo.loc[(mo.model == "kl-k8") & (mo.precision == "bf16"), ["match_rate", "ci_low", "ci_high"]] = [1.0, 0.98, 1.0]
    mo.to_csv(c / "match_overall.csv", index=False)
    assert seed_spread.main([str(a), f"other={c}", "--markdown"]) == 1
    out = capsys.readouterr().out
    header, _, *rows = out.splitlines()
    assert header.startswith("| claim") and " other |" in header and "1 with differing verdicts" in out
    row = next(x for x in rows if "| kl-k8/orthrus/bf16 " in x and x.startswith("| bf16-inexact"))
    assert "holds 1/2, fails 1/2" in row and "False" in row


def test_runs_must_hold_tables_and_distinct_names(tmp_path):
    with pytest.raises(SystemExit, match="holds no tables"):
        seed_spread.main([str(tmp_path)])
    a = _seed(tmp_path, "x", 0.0)
    with pytest.raises(SystemExit):
        seed_spread.main([str(a), str(a)])
