"""Training throughput: the single-pass multi-block step against training blocks one at a time.

    python benchmarks/train.py [--blocks 32] [--block-size 8] [--batch 4] [--steps 3] [--threads 1]

On a tiny random Qwen3 (hidden 128, 4 layers, vocab 2112: the tiny world's teacher shape), with
the same sequences, anchors and loss, it times forward + backward of

- `single-pass`: one frozen AR forward + ONE diffusion forward over all blocks with the
  block-sparse mask (`orthrus.distill.loss.block_loss`, what `orthrus train` runs);
- `per-block, shared AR`: one frozen AR forward, then one diffusion forward + backward per
  block over its own cache prefix;
- `per-block`: per block, a frozen AR forward over the prefix, then the diffusion forward +
  backward of that block (what one would write with the decoding code alone),

and prints loss tokens per second, the speed-up of the single pass, and the peak memory of
each (CUDA: `max_memory_allocated`; CPU: the child process' peak RSS above its set-up).
Each variant runs in its own child process so peaks do not mix. Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def build(args):
    import numpy as np
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from orthrus import OrthrusForCausalLM
    from orthrus.distill.data import make_batch
    from orthrus.distill.settings import offset_weights

    torch.manual_seed(0)
    conf = Qwen3Config(
        vocab_size=2112,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        attn_implementation=args.attention,
    )
    base = Qwen3ForCausalLM(conf)
    model = OrthrusForCausalLM.from_base(base, block_size=args.block_size, mask_token_id=831)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device).eval()
    g = np.random.default_rng(0)
    seqs, anchors = [], []
    for _ in range(args.batch):
        P, R = args.prompt_len, args.response_len
        seqs.append(g.integers(3, 800, size=P + R))
        anchors.append(np.sort(P + g.choice(R - 2, size=args.blocks, replace=False)))
    batch = make_batch(seqs, anchors, args.block_size, offset_weights(None, args.block_size), 831, 0)
    return model, batch, device


def per_block(model, batch, shared_ar: bool):
    """Loss SUM, backward done block by block (gradients accumulate in .grad)."""
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    from orthrus.distill.reference import CachePrefix
    from orthrus.models.cache import cache_kwarg

    K = model.block_size
    B, q = batch["blocks"].shape
    total = 0.0
    full = None
    if shared_ar:
        with torch.no_grad():
            full = DynamicCache(config=model.config)
            model.model(input_ids=batch["ids"], **cache_kwarg(model.model, full), use_cache=True)
    for s in range(B):
        for blk in range(q // K):
            sl = slice(blk * K, (blk + 1) * K)
            w = batch["w"][s, sl]
            if not (w > 0).any():
                continue
            a = int(batch["pos"][s, sl][0])
            if shared_ar:
                prefix = CachePrefix(full, s, a)
            else:
                with torch.no_grad():
                    prefix = DynamicCache(config=model.config)
                    model.model(
                        input_ids=batch["ids"][s : s + 1, :a], **cache_kwarg(model.model, prefix), use_cache=True
                    )
            lg = model.diffusion_forward(batch["blocks"][s : s + 1, sl], batch["pos"][s : s + 1, sl], prefix)[0]
            tok = F.cross_entropy(lg.float(), batch["targets"][s, sl], reduction="none")
            loss = (tok * w).sum()
            loss.backward()
            total += float(loss.detach())
    return total


def child(args) -> dict:
    import torch

    from orthrus.distill.loss import block_loss

    torch.set_num_threads(args.threads)
    model, batch, device = build(args)
    batch = {k: v.to(device) for k, v in batch.items()}
    cuda = device.type == "cuda"

    def step():
        model.zero_grad(set_to_none=True)
        if args.mode == "single":
            loss, _ = block_loss(model, batch, "ce", kl_weight=0.0)
            loss.backward()
            return float(loss.detach())
        return per_block(model, batch, shared_ar=args.mode == "per-block-shared-ar")

    loss = step()  # warm-up (also allocates the gradients)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base_mem = torch.cuda.memory_allocated()
    else:
        base_mem = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t = time.perf_counter()
    for _ in range(args.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    sec = (time.perf_counter() - t) / args.steps
    if cuda:
        peak, extra = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_allocated() - base_mem
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        extra = peak - base_mem
    W = float(batch["w"].sum())
    return {
        "mode": args.mode,
        "loss_per_token": loss / W,
        "seconds_per_step": sec,
        "loss_tokens": W,
        "tokens_per_s": W / sec,
        "peak_bytes": peak,
        "peak_over_setup_bytes": extra,
        "device": str(device),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--response-len", type=int, default=160)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--attention", default="sdpa", choices=["eager", "sdpa"])
    ap.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mode:
        print(json.dumps(child(args)))
        return 0
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:])]
    rows = []
    for mode in ("single", "per-block-shared-ar", "per-block"):
        out = subprocess.run([sys.executable, __file__, *passthrough, "--mode", mode], capture_output=True, text=True)
        if out.returncode:
            sys.stderr.write(out.stderr)
            return out.returncode
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ref = rows[0]
    print(
        f"tiny Qwen3 (hidden 128, 4 layers, vocab 2112), {args.batch} sequences x "
        f"({args.prompt_len} prompt + {args.response_len} response) tokens, {args.blocks} blocks of K="
        f"{args.block_size} per sequence, {ref['loss_tokens']:.0f} loss tokens per step, {ref['device']}, "
        f"{args.threads} thread(s), attention {args.attention}"
    )
    print(
        f"{'variant':<22}{'loss/token':>12}{'s/step':>10}{'tokens/s':>11}{'single/this':>12}"
        f"{'peak MiB':>10}{'+setup MiB':>12}"
    )
    for r in rows:
        print(
            f"{r['mode']:<22}{r['loss_per_token']:>12.6f}{r['seconds_per_step']:>10.3f}{r['tokens_per_s']:>11.0f}"
            f"{ref['tokens_per_s'] / r['tokens_per_s']:>12.1f}"
            f"{r['peak_bytes'] / 2**20:>10.1f}{r['peak_over_setup_bytes'] / 2**20:>12.1f}"
        )
    same = all(
        abs(r["loss_per_token"] - ref["loss_per_token"]) < 1e-4 * max(1, abs(ref["loss_per_token"])) for r in rows
    )
    ratio = ref["tokens_per_s"] / rows[-1]["tokens_per_s"]
    print(
        f"single-pass vs one block at a time: {ratio:.1f}x (target >= 8x); "
        f"vs per-block with a shared AR forward: {ref['tokens_per_s'] / rows[1]['tokens_per_s']:.1f}x; "
        f"same loss: {same}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
