"""Train the tiny-world teacher: a small `Qwen3ForCausalLM` on chat-formatted world samples.

`orthrus train-teacher --out DIR [--config CFG [--section teacher]] [--seed N]
 [--steps N] [--threads N] [--device cpu|cuda] [--tokenizer DIR] [--set key=value ...]`

`--tokenizer DIR` takes the tokenizer of an existing checkpoint instead of training one: a
draft model for assisted decoding is a smaller teacher with its teacher's tokenizer.

Writes (atomically, as one directory) a Hugging Face checkpoint that loads with
`AutoModelForCausalLM.from_pretrained(DIR)` / `AutoTokenizer.from_pretrained(DIR)`:
`config.json`, `model.safetensors`, `generation_config.json` (eos `<|im_end|>`, greedy),
the tokenizer files, `train_log.csv` (step, loss, lr, seconds), `teacher_eval.json`
(greedy exact-match per domain on held-out world samples) and `teacher_config.json`
(the resolved settings).

`config.vocab_size` is `len(tokenizer)` rounded UP to a multiple of 64 with at least one
spare row, so unused embedding rows exist (as in Qwen3, where the Orthrus mask token
takes id `len(tokenizer)`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import random
import sys
import time

from orthrus.errors import InputError
from orthrus.world.settings import DEFAULTS, TinyTeacher, as_dict, resolve


def padded_vocab(n_tokens: int, multiple: int = 64) -> int:
    """Smallest multiple of `multiple` strictly above `n_tokens`."""
    return (n_tokens // multiple + 1) * multiple


def make_model(cfg: dict | TinyTeacher, tokenizer):
    """A Qwen3 of the settings' shape, its weights drawn from their seed."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = resolve(cfg)
    conf = Qwen3Config(
        vocab_size=padded_vocab(len(tokenizer)),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=max(512, cfg.max_len * 2),
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(cfg.seed)
    model = Qwen3ForCausalLM(conf)
    return model


def _example(tokenizer, prompt: str, answer: str, max_len: int):
    from orthrus.chat import render_chat

    p = render_chat(tokenizer, prompt)
    a = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = (p + a)[:max_len]
    labels = ([-100] * len(p) + a)[:max_len]
    return ids, labels


def _batch(examples, pad_id: int):
    import torch

    n = max(len(i) for i, _ in examples)
    ids = torch.full((len(examples), n), pad_id, dtype=torch.long)
    lab = torch.full((len(examples), n), -100, dtype=torch.long)
    att = torch.zeros((len(examples), n), dtype=torch.long)
    for r, (i, lab_ids) in enumerate(examples):
        ids[r, : len(i)] = torch.tensor(i)
        lab[r, : len(lab_ids)] = torch.tensor(lab_ids)
        att[r, : len(i)] = 1
    return ids, att, lab


def _lr_at(step: int, cfg: TinyTeacher) -> float:
    w, total = cfg.warmup_steps, cfg.steps
    if step < w:
        return cfg.lr * (step + 1) / w
    frac = (step - w) / max(1, total - w)
    lo = cfg.min_lr_ratio
    return cfg.lr * (lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def greedy_eval(model, tokenizer, per_domain: int, seed: int, max_new_tokens: int = 128, batch_size: int = 16) -> dict:
    """Greedy exact-match of the teacher against the world's reference answers, per domain,
    on samples from a held-out stream; also the fraction of distinct outputs."""
    import torch

    from orthrus.chat import render_chat
    from orthrus.world.domains import DOMAINS, domain_rng, sample

    model.eval()
    out = {}
    eos = tokenizer.eos_token_id
    for d in DOMAINS:
        rng = domain_rng(seed, d, "teacher-eval")
        pairs = [sample(d, rng) for _ in range(per_domain)]
        texts = []
        for s in range(0, len(pairs), batch_size):
            chunk = pairs[s : s + batch_size]
            enc = [render_chat(tokenizer, p) for p, _ in chunk]
            n = max(map(len, enc))
            ids = torch.tensor([[tokenizer.pad_token_id] * (n - len(e)) + e for e in enc], device=model.device)
            att = torch.tensor([[0] * (n - len(e)) + [1] * len(e) for e in enc], device=model.device)
            with torch.no_grad():
                gen = model.generate(
                    input_ids=ids,
                    attention_mask=att,
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=eos,
                    pad_token_id=tokenizer.pad_token_id,
                )
            for row in gen[:, n:].tolist():
                if eos in row:
                    row = row[: row.index(eos)]
                texts.append(tokenizer.decode(row, skip_special_tokens=True))
        exact = sum(t.strip() == a.strip() for t, (_, a) in zip(texts, pairs))
        out[d] = {
            "n": len(pairs),
            "exact": exact / max(1, len(pairs)),
            "distinct_outputs": len(set(texts)) / max(1, len(texts)),
            "example_prompt": pairs[0][0] if pairs else "",
            "example_output": texts[0] if texts else "",
        }
    return out


def train_teacher(
    cfg: dict | TinyTeacher | None, out_dir, verbose: bool = True, tokenizer: str | None = None, device: str = "cpu"
) -> dict:
    """Train a teacher with settings `cfg` (orthrus/world/settings.py: a key left out at its default, a wrong one
    named) and save it to `out_dir` (atomic); with the tokenizer loaded from `tokenizer` (a checkpoint) when
    given, else a world BPE. On a CUDA
    `device` the forward and backward passes run under bf16 autocast with fp32 weights (as the
    distillation does there): a GPU's fp32 products are a fifteenth of its bf16 rate.

    Returns a summary dict (seconds, final loss, per-domain eval, parameters)."""
    import torch
    from transformers import GenerationConfig

    from orthrus.world.tokenizer import train_tokenizer

    cfg = resolve(cfg)
    torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    if tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
    else:
        tok = train_tokenizer(vocab_size=cfg.vocab_size, seed=cfg.seed)
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"train-teacher: device {device!r} asked for, but torch sees no CUDA device here")
    model = make_model(cfg, tok).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    _say(verbose, f"{n_params / 1e6:.2f}M parameters, vocab {len(tok)} -> {model.config.vocab_size}, on {device}")
    log_rows, ema = _fit(model, tok, cfg, t0, verbose)
    train_seconds = time.perf_counter() - t0
    model.eval()
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        do_sample=False,
        max_new_tokens=128,
    )
    ev = {}
    if cfg.eval_per_domain:
        ev = greedy_eval(model, tok, cfg.eval_per_domain, cfg.seed, cfg.eval_max_new_tokens)
        for d, r in ev.items():
            _say(verbose, f"eval {d:12s} exact {r['exact']:.2f} distinct {r['distinct_outputs']:.2f}")
    summary = {"parameters": n_params, "train_seconds": round(train_seconds, 2), "final_loss_ema": ema, "eval": ev}
    _save(out_dir, model.cpu(), tok, cfg, log_rows, summary)
    return summary


def _say(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"[teacher] {msg}", file=sys.stderr, flush=True)


def _pools(cfg: TinyTeacher):
    """Endless pools of `length_buckets` batches of world samples `(domain, prompt, answer)`,
    domains drawn by `domain_weights`: the text the teacher trains on."""
    from orthrus.world.domains import DOMAINS, domain_rng, sample

    weights = cfg.domain_weights or {}
    w = [float(weights.get(d, 1.0)) for d in DOMAINS]
    data_rng = random.Random(f"teacher-data|{cfg.seed}")
    dom_rngs = {d: domain_rng(cfg.seed, d, "teacher-train") for d in DOMAINS}
    n = cfg.batch_size * max(1, cfg.length_buckets)
    while True:
        yield [(d, *sample(d, dom_rngs[d])) for d in data_rng.choices(DOMAINS, weights=w, k=n)], data_rng


def _batches(tok, cfg: TinyTeacher):
    """Endless training batches: each pool sorted by length, cut into batches and shuffled."""
    bs = cfg.batch_size
    for samples, data_rng in _pools(cfg):
        pool = [_example(tok, p, a, cfg.max_len) for _, p, a in samples]
        pool.sort(key=lambda e: len(e[0]))
        queue = [pool[i * bs : (i + 1) * bs] for i in range(len(pool) // bs)]
        data_rng.shuffle(queue)
        while queue:
            yield _batch(queue.pop(), tok.pad_token_id)


def world_fingerprint(cfg: dict | TinyTeacher | None, own_tokenizer: bool = True) -> str:
    """SHA-256 of every world text a teacher with settings `cfg` learns from: its
    tokenizer's corpus (`own_tokenizer`; a draft takes its teacher's) and the samples of its
    `steps` batches, in order. A change of the world generator that changes no such text keeps
    a shipped teacher valid; any other change is caught (orthrus/world/subject)."""
    import hashlib
    from itertools import islice

    from orthrus.world.domains import corpus_text
    from orthrus.world.tokenizer import CORPUS_PER_DOMAIN

    cfg = resolve(cfg)
    h = hashlib.sha256()

    def add(text: str) -> None:
        b = text.encode()
        h.update(len(b).to_bytes(8, "little") + b)

    if own_tokenizer:
        for t in corpus_text(n_per_domain=CORPUS_PER_DOMAIN, seed=cfg.seed):
            add(t)
    n_pools = -(-cfg.steps // max(1, cfg.length_buckets))
    for samples, _ in islice(_pools(cfg), n_pools):
        for d, p, a in samples:
            add(d), add(p), add(a)
    return h.hexdigest()


def _fit(model, tok, cfg: TinyTeacher, t0: float, verbose: bool) -> tuple[list[dict], float | None]:
    """The training loop: AdamW (decay on matrices only), the warm-up + cosine schedule, gradient
    clipping; returns the log rows and the final loss EMA."""
    import torch

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    log_rows, ema = [], None
    model.train()
    batches = _batches(tok, cfg)
    device = model.device
    cuda = device.type == "cuda"
    for step in range(cfg.steps):
        ids, att, lab = (t.to(device, non_blocking=True) for t in next(batches))
        lr = _lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext():
            loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        lv = loss.item()
        ema = lv if ema is None else 0.9 * ema + 0.1 * lv
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            el = time.perf_counter() - t0
            log_rows.append({"step": step, "loss": round(lv, 5), "lr": lr, "seconds": round(el, 2)})
            _say(verbose, f"step {step} loss {lv:.4f} (ema {ema:.4f}) lr {lr:.2e} {el:.1f}s")
    return log_rows, ema


def _save(out_dir, model, tok, cfg: TinyTeacher, log_rows: list[dict], summary: dict) -> None:
    """The Hugging Face folder, the training log, the settings and the summary (atomic)."""
    from orthrus.io import atomic_path
    from orthrus.models.checkpoint import record_model_digests

    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        with open(tmp / "train_log.csv", "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=["step", "loss", "lr", "seconds"])
            wr.writeheader()
            wr.writerows(log_rows)
        (tmp / "teacher_config.json").write_text(json.dumps(as_dict(cfg), indent=2, sort_keys=True) + "\n")
        (tmp / "teacher_eval.json").write_text(json.dumps(summary, indent=2) + "\n")
        record_model_digests(tmp)  # hashed once, here: training fingerprints read the record


def main(argv: list[str] | None = None) -> int:
    from orthrus.config import apply_sets, load_config

    ap = argparse.ArgumentParser(prog="orthrus train-teacher", description="Train the tiny-world Qwen3 teacher.")
    ap.add_argument("--config", help="YAML/JSON file; its `teacher` section if present")
    ap.add_argument("--section", default="teacher")
    ap.add_argument("--out", required=True, help="output directory (HF format)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--device", default="cpu", help="torch device to train on (cpu, cuda, cuda:N)")
    ap.add_argument(
        "--tokenizer", help="checkpoint (directory or hub id) whose tokenizer to use instead of training one"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a setting; keys: {', '.join(DEFAULTS)}",
    )
    args = ap.parse_args(argv)
    cfg = apply_sets(load_config(args.config, args.section), args.set)
    for k in ("seed", "steps", "threads"):
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    summary = train_teacher(cfg, args.out, tokenizer=args.tokenizer, device=args.device)
    print(
        f"[teacher] saved to {args.out} ({summary['parameters'] / 1e6:.2f}M params, {summary['train_seconds']:.1f}s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
