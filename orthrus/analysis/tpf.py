"""Tokens per forward of the speculative decoders (Table 2), from the counts each decoding row
recorded (the formulas are `orthrus.decode.tpf.tokens_per_forward`, shared with `generate`), and
what they buy: each decoder's tokens per second beside the AR reference's."""

from __future__ import annotations

import numpy as np
import pandas as pd

from orthrus.analysis.load import run_settings
from orthrus.contracts import CONFIG, REFERENCE_DECODER, SPECULATIVE, SPEED_COLUMNS, TPF_COLUMNS, TPF_RUN
from orthrus.decode.tpf import tokens_per_forward
from orthrus.decoders import names
from orthrus.stats import t_ci, t_halfwidth

TPF_VALUES = ("tpf_verify", "tpf_all", "tpf_authors")
# the decoders the authors' formula is for: Orthrus's loop, drafting with the diffusion view
AUTHORS_LOOPS = names(diffusion=True)


def tpf_per_prompt(d: pd.DataFrame) -> pd.DataFrame:
    """`d` with each prompt's tokens per forward (orthrus.decode.tpf.tokens_per_forward):
    `tpf_verify` (over the model's forwards: prefill + verify), `tpf_all` (over every forward,
    the proposer's too: Orthrus's diffusion passes, the draft model's) and `tpf_authors`
    (Orthrus only: the formula counts a separate prefill, which transformers' assisted loop
    merges into its first verification). NaN where a prompt ran no such forward."""
    d = d.copy()
    acc = d["accepted"] if "accepted" in d.columns else pd.Series(None, index=d.index, dtype=object)
    pre, dif, ver = (
        pd.to_numeric(d[c], errors="coerce").to_numpy(float) for c in ("n_prefill", "n_diffusion", "n_verify")
    )
    per_prompt = [
        tokens_per_forward(len(t), p, f, v, a if dec in AUTHORS_LOOPS else None)
        for t, p, f, v, a, dec in zip(d["tokens"], pre, dif, ver, acc, d["decoder"])
    ]
    for col in TPF_VALUES:
        d[col] = np.array([x[col] for x in per_prompt], dtype=float)
    return d


def tpf_table(decode: pd.DataFrame) -> pd.DataFrame:
    """Tokens per forward of each speculative decoder (tpf_per_prompt), per run setting, per
    domain and over all prompts ('all')."""
    d = tpf_per_prompt(decode[decode["decoder"].isin(SPECULATIVE)])
    run = run_settings(d)
    d["message"] = run["message"]
    d["max_new_tokens"] = pd.array(run["max_new_tokens"], dtype="Int64")
    rows = []
    keys = CONFIG + TPF_RUN
    for key, g in d.groupby(keys, sort=True, dropna=False):
        parts = [(dom, gd) for dom, gd in g.groupby("domain", sort=True)] + [("all", g)]
        for dom, gd in parts:
            stats = {}
            for col in TPF_VALUES:
                v = gd[col].dropna()
                stats |= {col: t_ci(v)[0], f"{col}_ci": t_halfwidth(v)}
            rows.append(dict(zip(keys, key), domain=dom, n=len(gd), **stats))
    return pd.DataFrame(rows, columns=TPF_COLUMNS)


def speed_table(decode: pd.DataFrame) -> pd.DataFrame:
    """Tokens per second of every decoding cell beside the AR reference's (`ar-ref`) at the same
    precision and attention, over the prompts both decoded (each side's tokens over its decoding
    seconds, summed over those prompts: start-up and model loading left out); `speedup` is the
    ratio. Each cell is its own job, so cells that ran at once on a shared device time each other
    too: `orthrus frontier` times settings side by side in one process (exactness_cost.csv)."""
    decode = decode.assign(seconds=pd.to_numeric(decode.get("seconds", np.nan), errors="coerce"))  # engines may lack it
    ref = decode[decode["decoder"] == REFERENCE_DECODER]
    ref = {key: g.set_index("prompt_id")[["tokens", "seconds"]] for key, g in ref.groupby(["precision", "attention"])}
    none = pd.DataFrame({"tokens": [], "seconds": []})
    rows = []
    for key, g in decode.groupby(CONFIG, sort=True):
        cell = dict(zip(CONFIG, key))
        base = ref.get((cell["precision"], cell["attention"]), none)
        shared = g[g["prompt_id"].isin(base.index)]
        tps, ar_tps = _rate(shared), _rate(base.loc[shared["prompt_id"]])
        rows.append(
            cell
            | {
                "n": len(shared),
                "tokens": sum(len(t) for t in shared["tokens"]),
                "seconds": float(shared["seconds"].sum()),
                "tokens_per_second": tps,
                "ar_tokens_per_second": ar_tps,
                "speedup": tps / ar_tps if ar_tps > 0 else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=SPEED_COLUMNS)


def _rate(d: pd.DataFrame) -> float:
    """Tokens per second over the rows of `d` (NaN without timed rows)."""
    seconds = float(d["seconds"].sum())
    return sum(len(t) for t in d["tokens"]) / seconds if seconds > 0 else np.nan
