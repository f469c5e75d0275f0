"""orthrus compare-tables: two tables directories, table by table."""

import shutil

import numpy as np
import pandas as pd
import pytest

from orthrus import cli
from orthrus.report.compare_tables import cell_equal, compare_dirs, main


@pytest.fixture
def tables(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    pd.DataFrame(
        {"model": ["m", "m"], "decoder": ["orthrus", "ar"], "match_rate": [0.5, np.nan], "seconds": [1.0, 2.0]}
    ).to_csv(a / "match_overall.csv", index=False)
    (a / "match_overall.md").write_text("| rendered |\n")
    pd.DataFrame(
        {
            "prompt_id": ["p0", "p1", "p2"],
            "match": [True, False, True],
            "first_divergence": pd.array([None, 3, None], dtype="Int64"),
            "ppl": [1.5, np.nan, 2.0],
        }
    ).to_parquet(a / "trajectories.parquet", index=False)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    return a, b


def test_identical_directories(tables, capsys):
    a, b = tables
    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "match_overall.csv" in out and "trajectories.parquet" in out and ".md" not in out
    assert "2 table(s), 0 differ" in out
    assert cli.main(["compare-tables", str(a), str(b)]) == 0  # registered as an orthrus command


def test_one_changed_value_names_table_and_column(tables, capsys):
    a, b = tables
    df = pd.read_parquet(b / "trajectories.parquet")
    df.loc[1, "ppl"] = 3.0  # NaN -> 3.0 in one row; the NaNs elsewhere still compare equal
    df.to_parquet(b / "trajectories.parquet", index=False)
    assert main([str(a), str(b)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("trajectories.parquet"))
    assert "differs" in line and "ppl: 1 row" in line and "match" not in line.split("differs")[1]
    csv = pd.read_csv(b / "match_overall.csv")
    csv.loc[0, "match_rate"] = 0.25
    csv.to_csv(b / "match_overall.csv", index=False)
    rows = {r.name: r for r in compare_dirs(a, b)}
    assert rows["match_overall.csv"].status == "differs" and rows["match_overall.csv"].detail == "match_rate: 1 row"


def test_a_file_in_one_directory_only(tables, capsys):
    a, b = tables
    (b / "trajectories.parquet").unlink()
    pd.DataFrame({"x": [1]}).to_csv(b / "extra.csv", index=False)
    assert main([str(a), str(b)]) == 1
    rows = {r.name: r.status for r in compare_dirs(a, b)}
    assert rows == {"extra.csv": "only in B", "match_overall.csv": "same", "trajectories.parquet": "only in A"}
    assert main([str(a), str(b), "--common"]) == 0  # only the tables both hold
    assert "1 table(s), 0 differ" in capsys.readouterr().out


def test_ignore_leaves_columns_out(tables, capsys):
    a, b = tables
    csv = pd.read_csv(b / "match_overall.csv")
    csv["seconds"] = [9.0, 9.5]  # a timing
    csv["added"] = 1  # a new column
    csv.to_csv(b / "match_overall.csv", index=False)
    assert main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "seconds: 2 rows" in out and "columns only in B: added" in out
    assert main([str(a), str(b), "--ignore", "seconds", "--ignore", "added"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("match_overall.csv"))
    assert "same except ignored" in line and "seconds: 2 rows" in line and "added" in line
    assert main([str(a), str(b), "--ignore", "seconds"]) == 1  # `added` still differs


def test_dtype_change_and_cells():
    a = pd.DataFrame({"n": [1, 2]})
    b = pd.DataFrame({"n": [1.0, 2.0]})
    from orthrus.report.compare_tables import column_differences

    assert column_differences(a, b) == ["n: dtype int64 vs float64"]
    assert cell_equal(np.nan, None) and cell_equal([1, 2], np.array([1, 2])) and not cell_equal([1], [1, 2])
    assert not cell_equal(0.1 + 0.2, 0.3)  # exact, not approximate


def test_missing_directory(tmp_path, capsys):
    assert cli.main(["compare-tables", str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err
