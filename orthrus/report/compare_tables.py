"""`orthrus compare-tables`: do two tables directories hold the same results?

    orthrus compare-tables DIR_A DIR_B [--ignore COL ...]

Compares every table file (`*.csv`, `*.parquet`; the Markdown twins are rendered from the
CSVs and left out) of two `results/tables/` directories, e.g. before and after a refactor:
a CSV is the same when its bytes are, a Parquet file when `pandas.DataFrame.equals` says so
after reading. For a table that differs it names the columns that differ and in how many
rows (cells compared with exact equality, NaN equal to NaN; CSV cells as their text), columns
or rows only one side has, and dtype changes. `--ignore COL` (repeatable) leaves a column out
of every table, e.g. timings; a table whose differences all lie in ignored columns counts as
the same and says so. Files present in one directory only are reported.

Prints one line per table; exit status 0 when every table is the same, 1 otherwise (also when
neither directory holds a table: nothing was compared).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from orthrus.io import InputError

SUFFIXES = (".csv", ".parquet")
SAME, SAME_IGNORED, DIFFERS = "same", "same except ignored", "differs"


@dataclass
class TableComparison:
    name: str
    status: str  # SAME, SAME_IGNORED, DIFFERS, or "only in A" / "only in B"
    detail: str = ""

    @property
    def same(self) -> bool:
        return self.status in (SAME, SAME_IGNORED)


def read_table(path: Path) -> pd.DataFrame:
    """A Parquet table as pandas reads it; a CSV table as its text, cell by cell."""
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)


def _isna(x) -> bool:
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):  # not a scalar
        return False


def _equals(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    try:
        return bool(a.equals(b))
    except (TypeError, ValueError):  # cells pandas cannot compare (e.g. arrays of different lengths)
        return False


def cell_equal(x, y) -> bool:
    """Exact equality of two cells, NaN/None/NA equal to each other; lists and arrays element by element."""
    seq = (list, tuple, np.ndarray)
    if isinstance(x, seq) or isinstance(y, seq):
        if not (isinstance(x, seq) and isinstance(y, seq)):
            return False
        x, y = np.asarray(x, dtype=object), np.asarray(y, dtype=object)
        return x.shape == y.shape and all(cell_equal(a, b) for a, b in zip(x.ravel(), y.ravel()))
    if _isna(x) or _isna(y):
        return _isna(x) and _isna(y)
    try:
        return bool(x == y)
    except (TypeError, ValueError):
        return False


def column_differences(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """What differs between two tables: columns or rows one side lacks, and per shared column
    the rows (of the shared ones, by position) whose values differ, or a changed dtype."""
    out = []
    only_a = [c for c in a.columns if c not in b.columns]
    only_b = [c for c in b.columns if c not in a.columns]
    if only_a:
        out.append(f"columns only in A: {', '.join(map(str, only_a))}")
    if only_b:
        out.append(f"columns only in B: {', '.join(map(str, only_b))}")
    shared = [c for c in a.columns if c in b.columns]
    if not only_a and not only_b and list(a.columns) != list(b.columns):
        out.append("column order differs")
    if len(a) != len(b):
        out.append(f"rows {len(a)} vs {len(b)}")
    n = min(len(a), len(b))
    for c in shared:
        x, y = a[c].iloc[:n].tolist(), b[c].iloc[:n].tolist()
        k = sum(not cell_equal(u, v) for u, v in zip(x, y))
        if k:
            out.append(f"{c}: {k} row{'s' if k != 1 else ''}")
        elif a[c].dtype != b[c].dtype:
            out.append(f"{c}: dtype {a[c].dtype} vs {b[c].dtype}")
    if not out and not _equals(a, b):  # e.g. a different index
        out.append("not equal (index or column labels)")
    return out


def compare_file(path_a: Path, path_b: Path, ignore=()) -> TableComparison:
    """Compare one table present in both directories."""
    name = path_a.name
    if path_a.suffix == ".csv" and path_a.read_bytes() == path_b.read_bytes():
        return TableComparison(name, SAME)
    a, b = read_table(path_a), read_table(path_b)
    if path_a.suffix == ".parquet" and _equals(a, b):
        return TableComparison(name, SAME)
    ignored = [c for c in ignore if c in a.columns or c in b.columns]
    diffs = column_differences(a.drop(columns=ignored, errors="ignore"), b.drop(columns=ignored, errors="ignore"))
    if diffs:
        return TableComparison(name, DIFFERS, "; ".join(diffs))
    if not ignored:  # a CSV whose bytes differ though its cells read the same (quoting, line ends)
        return TableComparison(name, DIFFERS, "bytes differ, cells equal")
    in_ignored = column_differences(
        a[[c for c in ignored if c in a.columns]], b[[c for c in ignored if c in b.columns]]
    )
    return TableComparison(name, SAME_IGNORED, "ignored: " + "; ".join(in_ignored or ["no difference"]))


def table_files(directory: Path) -> dict[str, Path]:
    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory")
    return {p.name: p for p in sorted(directory.iterdir()) if p.is_file() and p.suffix in SUFFIXES}


def compare_dirs(dir_a, dir_b, ignore=(), common: bool = False) -> list[TableComparison]:
    """One comparison per table file of either directory (of both, with `common`), by file name."""
    a, b = table_files(Path(dir_a)), table_files(Path(dir_b))
    out = []
    for name in sorted(a.keys() & b.keys() if common else a.keys() | b.keys()):
        if name not in b:
            out.append(TableComparison(name, "only in A"))
        elif name not in a:
            out.append(TableComparison(name, "only in B"))
        else:
            out.append(compare_file(a[name], b[name], ignore))
    return out


def format_report(rows: list[TableComparison], dir_a, dir_b) -> str:
    width = max([len("table")] + [len(r.name) for r in rows])
    swidth = max(len(r.status) for r in rows) if rows else len("status")
    lines = [f"A: {dir_a}", f"B: {dir_b}", f"{'table':<{width}}  {'status':<{swidth}}  detail"]
    lines += [f"{r.name:<{width}}  {r.status:<{swidth}}  {r.detail}".rstrip() for r in rows]
    n_diff = sum(not r.same for r in rows)
    lines.append(f"{len(rows)} table(s), {n_diff} differ" if rows else "no table files")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus compare-tables", description=__doc__.split("\n\n")[0])
    ap.add_argument("dir_a", metavar="DIR_A", help="a tables directory (e.g. before a change)")
    ap.add_argument("dir_b", metavar="DIR_B", help="the other (e.g. after it)")
    ap.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="COL",
        help="leave this column out of every table (repeatable), e.g. timings",
    )
    ap.add_argument(
        "--common",
        action="store_true",
        help="compare only the tables both directories hold (e.g. docs/results keeps the CSVs only)",
    )
    args = ap.parse_args(argv)
    rows = compare_dirs(args.dir_a, args.dir_b, args.ignore, args.common)
    sys.stdout.write(format_report(rows, args.dir_a, args.dir_b))
    return 0 if rows and all(r.same for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
