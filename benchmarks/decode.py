"""AR vs Orthrus greedy decoding, side by side in one run: wall time, ratio, TPF, loop overhead, memory.

    python benchmarks/decode.py --model results/models/ce-k8 --prompts results/prompts/eval.parquet

Without --model it builds a tiny random Orthrus (the ratio is then meaningless: random
diffusion weights accept nothing; it still measures the loop's own overhead). "Loop
overhead" is the wall time of the Orthrus loop outside its forward passes, relative to them.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections import defaultdict

import pandas as pd
import torch

import orthrus
from orthrus.chat import render_chat


def timed(model):
    """Wrap the model's two forwards to accumulate their wall time."""
    spent = {"forward": 0.0}
    for name in ("forward", "diffusion_forward"):
        inner = getattr(model, name)

        def wrapper(*a, _inner=inner, **k):
            t0 = time.perf_counter()
            out = _inner(*a, **k)
            spent["forward"] += time.perf_counter() - t0
            return out

        setattr(model, name, wrapper)
    return spent


def load(args):
    if args.model:
        from transformers import AutoTokenizer

        model = orthrus.OrthrusForCausalLM.from_pretrained(
            args.model, dtype=args.precision, attn_implementation=args.attention
        )
        tok = AutoTokenizer.from_pretrained(args.model)
        prompts = pd.read_parquet(args.prompts)
        prompts = prompts.groupby("domain").head(args.per_domain)
        return model, [(r.domain, torch.tensor(render_chat(tok, r.prompt, args.message))) for r in prompts.itertuples()]
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=True,
        attn_implementation=args.attention,
    )
    model = orthrus.OrthrusForCausalLM.from_base(Qwen3ForCausalLM(cfg), block_size=8, mask_token_id=511).eval()
    return model, [("random", torch.randint(0, 500, (20,))) for _ in range(args.per_domain)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="trained Orthrus checkpoint (default: a tiny random one)")
    ap.add_argument("--prompts", default="results/prompts/eval.parquet")
    ap.add_argument("--per-domain", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--attention", default="eager")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--message", default="empty", help="the study's decode.message (configs/smollm2.yaml: none)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, prompts = load(args)
    spent = timed(model)
    eos = model.generation_config.eos_token_id
    orthrus.generate(model, prompts[0][1], decoder="orthrus", max_new_tokens=8)  # warm-up
    rows = defaultdict(lambda: defaultdict(float))
    for domain, ids in prompts:
        for mode in ("ar", "orthrus"):
            spent["forward"] = 0.0
            out = orthrus.generate(model, ids, decoder=mode, max_new_tokens=args.max_new_tokens, eos_token_id=eos)
            r = rows[(domain, mode)]
            r["seconds"] += out.stats["seconds"]
            r["forward_seconds"] += spent["forward"]
            r["tokens"] += out.stats["n_tokens"]
            r["verify_forwards"] += out.stats["n_prefill"] + out.stats["n_verify"]
            r["all_forwards"] += out.stats["n_prefill"] + out.stats["n_verify"] + out.stats["n_diffusion"]
    table = []
    for domain in dict.fromkeys(d for d, _ in prompts):
        ar, orth = rows[(domain, "ar")], rows[(domain, "orthrus")]
        table.append(
            {
                "domain": domain,
                "ar_ms_per_token": 1e3 * ar["seconds"] / ar["tokens"],
                "orthrus_ms_per_token": 1e3 * orth["seconds"] / orth["tokens"],
                "speedup": (ar["seconds"] / ar["tokens"]) / (orth["seconds"] / orth["tokens"]),
                "tpf_verify": orth["tokens"] / orth["verify_forwards"],
                "tpf_all": orth["tokens"] / orth["all_forwards"],
                "loop_overhead": orth["seconds"] / orth["forward_seconds"] - 1,
            }
        )
    df = pd.DataFrame(table).sort_values("speedup", ascending=False)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    total = {m: sum(v["seconds"] for (d, mm), v in rows.items() if mm == m) for m in ("ar", "orthrus")}
    print(f"\noverall speedup (AR time / Orthrus time, same prompts): {total['ar'] / total['orthrus']:.2f}x")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
