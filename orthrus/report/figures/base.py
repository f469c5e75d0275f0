"""What every figure shares: matplotlib set-up, reading a table, empty panels, error bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from orthrus.errors import InputError

_STR_COLS = {
    c: str
    for c in (
        "model",
        "decoder",
        "precision",
        "attention",
        "domain",
        "a_model",
        "a_decoder",
        "a_precision",
        "a_attention",
        "b_model",
        "b_decoder",
        "b_precision",
        "b_attention",
    )
}


class FigureError(InputError):
    pass


def _legend(ax, n_series: int, fontsize: int = 8) -> None:
    """The legend inside the axes for a few series; for many (paper scale: 18-22 series of models x
    decoders x precisions) outside, right of the panel, so it covers no data."""
    if n_series <= 6:
        ax.legend(fontsize=fontsize)
    else:
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, ncol=1 + n_series // 24)


def _empty(ax, msg: str) -> None:
    ax.text(0.5, 0.5, msg, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="0.3", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _read_table(tables_dir: Path, name: str, required: bool):
    path = tables_dir / name
    if not path.exists():
        if required:
            raise FigureError(f"table {path} does not exist (run `orthrus analyze` first)")
        return None
    if name.endswith(".parquet"):
        return pd.read_parquet(path)
    return pd.read_csv(path, dtype=_STR_COLS)


def _need(df: pd.DataFrame, cols, name: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise FigureError(f"table {name} lacks column(s) {', '.join(map(repr, missing))}")


def _errbar(rate, low, high):
    rate, low, high = (np.asarray(x, dtype=float) for x in (rate, low, high))
    return np.vstack([np.clip(rate - low, 0, None), np.clip(high - rate, 0, None)])
