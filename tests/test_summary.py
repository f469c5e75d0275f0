"""The README's result section is the committed default run's tables, rendered."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from orthrus import summary

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "docs" / "results"


def test_readme_results_block_is_rendered_from_the_committed_run():
    assert summary.main(["--tables", str(RUN), "--readme", str(ROOT / "README.md"), "--check"]) == 0


def test_a_changed_table_makes_the_readme_stale(tmp_path):
    tables = tmp_path / "tables"
    shutil.copytree(RUN, tables)
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    mo = pd.read_csv(tables / "match_overall.csv")
    mo.loc[(mo["decoder"] == "orthrus") & (mo["precision"] == "fp32"), "match_rate"] = 0.5
    mo.to_csv(tables / "match_overall.csv", index=False)
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 1
    assert summary.main(["--tables", str(tables), "--readme", str(readme)]) == 0
    assert "| fp32 | 0.50 / 0.50 | 0.50 / 0.50 |" in readme.read_text()
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 0


def test_missing_table_and_missing_markers_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="match_overall.csv"):
        summary.render(tmp_path)
    with pytest.raises(ValueError, match="results:begin"):
        summary.replace_block("no markers here", "x")
