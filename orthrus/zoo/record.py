"""The zoo's record: one row per case and release (zoo.csv, zoo.md), a figure, and the findings block
of a document rendered from the record, never typed.

A case stays in the record whatever happened to it: a release that did not install, a driver that
failed, a miss under a short plan each keep their row with the reason.

    orthrus zoo record ROWS.json... --out DIR [--readme FILE.md ...]
    orthrus zoo render --record DIR/zoo.csv --readme FILE.md [--check]
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from orthrus.io import atomic_path

EXPECTED = {"affected": "caught", "fixed": "passed"}
COLUMNS = ["case", "issue", "engine", "package", "side", "version", "patch", "mode", "verdict", "expected",
           "as_expected", "statistic", "statistic_name", "dof", "p_value", "control_p_value", "n", "prompts",
           "power", "divergent", "structural", "plan", "reason", "environment"]  # fmt: skip
# what of a release's environment the table shows (the row's JSON keeps the whole, pip freeze included)
ENV_KEYS = ("version", "torch", "llama_cpp", "vllm", "threads", "dtype", "attention", "cpu_capability", "kv_cache",
            "weights", "patch", "machine")  # fmt: skip
BLOCK = ("<!-- zoo:begin -->", "<!-- zoo:end -->")


def row_of(case_name: str, case, row: dict) -> dict:
    env = row.get("environment") or {}
    out = {"case": case_name, "issue": case.issue, "engine": case.engine, "package": case.package, "mode": case.mode,
           "prompts": case.prompts, "expected": EXPECTED[row["side"]]}  # fmt: skip
    out |= {k: row.get(k) for k in COLUMNS if k in row and k != "environment"}
    out["as_expected"] = row["verdict"] == out["expected"]
    out["environment"] = json.dumps({k: env[k] for k in ENV_KEYS if k in env}, sort_keys=True)
    return out


def table(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows).reindex(columns=COLUMNS)
    return df.sort_values(["case", "side"], key=lambda s: s.map({"affected": 0, "fixed": 1}) if s.name == "side" else s)


def _fmt(x, spec: str = ".3g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return format(x, spec) if isinstance(x, float) else str(x)


def note(r) -> str:
    """Why a row says what it says: the reason it has no test, or what the test counted."""
    if isinstance(r.reason, str):
        return r.reason
    if r.mode == "greedy":
        return f"{_fmt(r.structural)} of {_fmt(r.n)} prompts structural ({_fmt(r.divergent)} diverged)"
    return f"plain sampling's p {_fmt(r.control_p_value, '.2g')} (the control)"


def markdown(df: pd.DataFrame) -> str:
    """The findings: one line per case and release, what was expected and what the audit said."""
    head = "| case | release | expected | verdict | test | statistic | p | n | note |\n|---|---|---|---|---|---|---|---|---|\n"
    lines = []
    for r in df.itertuples():
        release = r.version if not isinstance(r.patch, str) else f"{r.version} + {r.patch}"
        lines.append(f"| {r.case} ({r.issue}) | {release} ({r.side}) | {r.expected} | **{r.verdict}** | "
                     f"{_fmt(r.statistic_name)} | {_fmt(r.statistic)} | {_fmt(r.p_value, '.2g')} | {_fmt(r.n)} | "
                     f"{note(r)} |")  # fmt: skip
    ok = int(df["as_expected"].sum())
    tail = f"\n{ok} of {len(df)} rows as expected: caught at the affected release, passed at the fixed one.\n"
    return head + "\n".join(lines) + "\n" + tail


def figure(df: pd.DataFrame, path: Path) -> None:
    """Each case's two releases: the sampled test's -log10 p, a greedy case's structural prompts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, mode in zip(axes, ("sampled", "greedy")):
        sub = df[df["mode"] == mode]
        top = 1.0
        for side, color in (("affected", "tab:red"), ("fixed", "tab:green")):
            s = sub[sub["side"] == side]
            y = (
                -pd.to_numeric(s["p_value"]).clip(lower=1e-300).map(math.log10)
                if mode == "sampled"
                else s["structural"]
            )
            ax.scatter(s["case"], y, color=color, label=side, zorder=3)
            top = max([top, *pd.to_numeric(y, errors="coerce").dropna()])
        if mode == "sampled":  # from 0.1 (a pass) to 300 (p below a float's range): symlog shows both
            ax.axhline(2, color="gray", ls="--", lw=1, label="alpha 0.01")
            ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(0, top * (4 if mode == "sampled" else 1.2))
        ax.set_title(
            f"{mode}: "
            + ("-log10 p of the known-p test" if mode == "sampled" else "prompts with a structural divergence")
        )
        ax.tick_params(axis="x", rotation=20)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    for ext in (".png", ".pdf"):
        with atomic_path(path.with_suffix(ext)) as tmp:
            fig.savefig(tmp, format=ext[1:], dpi=110)
    plt.close(fig)


def render(doc: Path, df: pd.DataFrame, check: bool = False) -> bool:
    """Write (or check) `doc`'s findings block from the record; True when it was already up to date."""
    text = doc.read_text()
    begin, end = BLOCK
    if begin not in text or end not in text:
        raise ValueError(f"{doc}: no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{begin}\n{markdown(df)}{end}{tail}"
    if check or new == text:
        return new == text
    doc.write_text(new)
    return False
