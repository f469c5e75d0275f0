"""Atomic file output: a killed stage never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
from pathlib import Path

from orthrus.errors import InputError  # noqa: F401  (re-exported: stages raise it from here)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary sibling path; move it onto `path` only if the block succeeds.

    Works for files and directories (e.g. a saved model): the caller writes to the
    yielded path, and readers see either nothing or the complete result.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a write of this same output that was killed left its temporary sibling: one job writes an
    # output at a time, so it is garbage now
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path, obj) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_parquet(path, df) -> None:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)


def write_table(df, csv_path) -> None:
    """Write a results table as CSV plus a Markdown twin beside it."""
    csv_path = Path(csv_path)
    with atomic_path(csv_path) as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(csv_path.with_suffix(".md")) as tmp:
        tmp.write_text(df.to_markdown(index=False, floatfmt=".4g") + "\n")


def save_figure(fig, stem) -> list[Path]:
    """Write `fig` as `{stem}.png` and `{stem}.pdf`, without timestamps, atomically."""
    written = []
    for fmt in ("png", "pdf"):
        path = Path(f"{stem}.{fmt}")
        meta = {"CreationDate": None} if fmt == "pdf" else {"Software": None}
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, metadata=meta)
        written.append(path)
    return written
