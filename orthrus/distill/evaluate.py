"""Held-out tokens per forward during training, with the real `orthrus.generate` loop."""

from __future__ import annotations

import numpy as np

from orthrus.distill.dist import log


def eval_prompt_ids(path, tokenizer, per_domain: int) -> list[tuple[str, list[int]]]:
    """(domain, prompt token ids) of the first `per_domain` prompts of each domain (file order).
    Accepts a prompt set (`prompt`, rendered with the chat template) or a corpus (`prompt_ids`)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from orthrus.chat import render_chat
    from orthrus.data.prompt_set import read_prompt_set

    corpus = "prompt_ids" in pq.read_schema(path).names
    df = pd.read_parquet(path) if corpus else read_prompt_set(path)
    if "domain" not in df.columns:
        df = df.assign(domain="-")
    df = df.groupby("domain", sort=True, group_keys=False).head(per_domain)
    out = []
    for r in df.itertuples(index=False):
        ids = list(r.prompt_ids) if "prompt_ids" in df.columns else render_chat(tokenizer, r.prompt)
        out.append((r.domain, ids))
    return out


def evaluate_tpf(model, prompts: list, max_new_tokens: int, step: int) -> list[dict]:
    """Held-out tokens per forward of the real Orthrus loop, per domain and overall ('all')."""
    import torch

    from orthrus.decode.loop import generate

    device = next(model.parameters()).device
    per: dict = {}
    for dom, ids in prompts:
        out = generate(model, torch.tensor(ids, device=device), decoder="orthrus", max_new_tokens=max_new_tokens)
        acc = out.stats["accepted"]
        row = {
            "tpf_verify": out.stats["tpf_verify"],
            "tpf_all": out.stats["tpf_all"],
            "tpf_authors": out.stats["tpf_authors"],
            "accepted_mean": float(np.mean(acc)) if acc else 0.0,
        }
        per.setdefault(dom, []).append(row)
    rows = []
    every = [r for v in per.values() for r in v]
    for dom, rs in [*sorted(per.items()), ("all", every)]:
        rows.append(
            {
                "step": step,
                "domain": dom,
                "n": len(rs),
                **{
                    k: float(np.mean([r[k] for r in rs]))
                    for k in ("tpf_verify", "tpf_all", "tpf_authors", "accepted_mean")
                },
            }
        )
    return rows


def log_eval(rows: list[dict], step: int) -> None:
    """One line: the overall TPF (the last row), then each domain's."""
    overall = rows[-1]
    log(
        f"eval step {step}: tpf_verify {overall['tpf_verify']:.3f} over {overall['n']} prompts; "
        + ", ".join(f"{r['domain']} {r['tpf_verify']:.2f}" for r in rows[:-1])
    )
