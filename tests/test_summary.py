"""docs/RESULTS.md's results section and the README's claims table are the committed default run's
tables, rendered."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from orthrus.report import summary

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "docs" / "results"


def test_results_and_readme_blocks_are_rendered_from_the_committed_run():
    docs = [str(ROOT / "docs" / "RESULTS.md"), str(ROOT / "README.md")]
    assert summary.main(["--tables", str(RUN), "--readme", docs[0], "--readme", docs[1], "--check"]) == 0
    assert summary.BEGIN in Path(docs[0]).read_text() and "<!-- claims:begin -->" in Path(docs[1]).read_text()


def test_the_real_model_page_is_rendered_from_its_committed_run():
    """docs/REAL-MODEL.md's numbers are configs/smollm2.yaml's committed run (docs/real-model/)."""
    page = ROOT / "docs" / "REAL-MODEL.md"
    assert summary.main(["--tables", str(ROOT / "docs" / "real-model"), "--readme", str(page), "--check"]) == 0
    assert "| fp32-exact | every fp32 cell |" in page.read_text()


def test_a_changed_claim_makes_the_readme_stale(tmp_path):
    tables = tmp_path / "tables"
    shutil.copytree(RUN, tables)
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    claims = pd.read_csv(tables / "claims.csv")
    claims.loc[claims["claim"] == "fp32-exact", "verdict"] = "fails"
    claims.to_csv(tables / "claims.csv", index=False)
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 1
    assert summary.main(["--tables", str(tables), "--readme", str(readme)]) == 0
    row = next(line for line in readme.read_text().splitlines() if line.startswith("| fp32-exact |"))
    assert "| fails (" in row and "| holds" not in row, row
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 0


def test_a_changed_table_makes_the_results_stale(tmp_path):
    tables = tmp_path / "tables"
    shutil.copytree(RUN, tables)
    readme = tmp_path / "RESULTS.md"
    shutil.copy(ROOT / "docs" / "RESULTS.md", readme)
    mo = pd.read_csv(tables / "match_overall.csv")
    mo.loc[(mo["decoder"] == "orthrus") & (mo["precision"] == "fp32"), "match_rate"] = 0.5
    mo.to_csv(tables / "match_overall.csv", index=False)
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 1
    assert summary.main(["--tables", str(tables), "--readme", str(readme)]) == 0
    fp32_row = next(line for line in readme.read_text().splitlines() if line.startswith("| fp32 |"))
    assert "0.50" in fp32_row and "1.00" not in fp32_row, fp32_row
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 0


def test_missing_table_and_missing_markers_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="match_overall.csv"):
        summary.render(tmp_path)
    with pytest.raises(ValueError, match="results:begin"):
        summary.replace_block("no markers here", "x")
    with pytest.raises(ValueError, match="results:begin.*claims:begin"):
        summary.update("no markers here", RUN)


def _with_eager(tables: Path, model: str) -> Path:
    """`tables` as if `model` had also decoded on eager, with its sdpa results there."""
    for path in tables.glob("*.csv"):
        if path.name.startswith("benchmarks"):  # the benchmarks run on one kernel whatever the grid
            continue
        t = pd.read_csv(path)
        # the frontier's table has every kernel already
        if {"model", "attention"} <= set(t.columns) and not ((t["model"] == model) & (t["attention"] == "eager")).any():
            extra = t[(t["model"] == model) & (t["attention"] == "sdpa")]
            extra = extra[extra["decoder"] == "orthrus"] if "decoder" in extra.columns else extra
            extra = extra.assign(attention="eager")
            pd.concat([t, extra]).to_csv(path, index=False)
    return tables


def test_a_model_narrowed_by_decode_grids_is_rendered_with_dashes(tmp_path):
    """ce-k8 on eager and sdpa, kl-k8 narrowed to sdpa: its eager cells are dashes; with kl-k8 on
    eager too there are none."""
    shutil.copytree(RUN, tmp_path / "narrowed")
    narrowed_run = _with_eager(tmp_path / "narrowed", "ce-k8")
    shutil.copytree(narrowed_run, tmp_path / "full")
    narrowed, full = summary.render(narrowed_run), summary.render(_with_eager(tmp_path / "full", "kl-k8"))
    assert "not decode it" not in full
    row = lambda text: next(x for x in text.splitlines() if x.startswith("| fp32 | ") and " / " in x)
    eager, sdpa = row(narrowed).split(" | ")[1:3]  # a cell per kernel: ce-k8 / kl-k8
    assert eager.endswith(" / -") and "-" not in sdpa and "-" not in row(full)
    assert "`-`: no result in that cell (a model narrowed by `decode.grids` does not decode it)." in narrowed
    # the per-domain, PPL and TPF tables stay at a setting both models ran, so no model is n/a there
    assert "Per domain, bf16 with sdpa" in narrowed and "Tokens per forward, fp32, sdpa" in narrowed
    block = narrowed.split("Divergence and perplexity", 1)[1].split("\n\n")[1]
    assert "| kl-k8 |" in block and "n/a |" not in block.split("| kl-k8 |")[1].split("\n")[0]


def test_diverging_setting_prefers_cells_every_model_ran():
    """Model b ran sdpa only: eager's mean (a alone) is lower, but the setting is the shared sdpa."""
    rows = [
        ("a", "bf16", "eager", 0.5),
        ("a", "bf16", "sdpa", 0.9),
        ("b", "bf16", "sdpa", 0.2),
        ("a", "fp32", "eager", 1.0),
        ("a", "fp32", "sdpa", 1.0),
        ("b", "fp32", "sdpa", 1.0),
    ]
    overall = pd.DataFrame(rows, columns=["model", "precision", "attention", "match_rate"]).assign(decoder="orthrus")
    assert summary.diverging_setting(overall) == ("bf16", "sdpa")
    # with no cell every model ran, the worst cell over all
    overall = overall[~((overall.model == "b") & (overall.precision == "bf16"))]
    assert summary.diverging_setting(overall) == ("bf16", "eager")
