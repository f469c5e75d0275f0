"""`train()`: the distillation run as one loop over optimizer steps; `main()`: `orthrus train`.

What one step computes and what a run writes: see the package docstring (`orthrus.distill`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from orthrus.distill import dist, resume
from orthrus.distill.data import Corpus, GlobalBatches, make_batch, n_weighted
from orthrus.distill.evaluate import eval_prompt_ids, evaluate_tpf, log_eval
from orthrus.distill.loss import step_module
from orthrus.distill.outputs import LiveLog, write_outputs
from orthrus.distill.settings import DEFAULTS, Settings, offset_weights, resolve_settings
from orthrus.distill.student import load_student, make_optimizer
from orthrus.errors import InputError, MissingInputError


@dataclass
class Run:
    """What a run sets up before its first step."""

    s: Settings
    device: object
    corpus: Corpus
    batches: GlobalBatches
    model: object
    tokenizer: object
    params: list  # the diffusion parameters, the only ones trained
    weights: object  # loss weight of each block slot
    runner: object  # the step module, under DDP when there are several processes
    opt: object
    sched: object
    total: int  # optimizer steps of the whole run
    teacher_dir: object
    n_all: int
    n_train: int
    pad_id: int
    eval_set: list | None = None


class StepSums:
    """One step's sums over its micro-batches and, after `reduce`, over the processes: loss,
    loss weight, ce, kl and acc as one float64 tensor (so that one all_reduce adds them), plus
    the tokens of the step's sequences."""

    SLOTS = ("loss", "weight", "ce", "kl", "acc")

    def __init__(self):
        import torch

        self.sums = torch.zeros(len(self.SLOTS), dtype=torch.float64)
        self.tokens = 0

    def add(self, loss_sum, stats: dict, tokens: int) -> None:
        import torch

        self.sums += torch.tensor([float(loss_sum.detach()), *(stats[k] for k in self.SLOTS[1:])], dtype=torch.float64)
        self.tokens += tokens

    def reduce(self) -> None:
        if dist.world() > 1:
            import torch

            # the token count rides along as a sixth slot: still one all_reduce per step
            red = dist.all_reduce_sum(torch.cat([self.sums, torch.tensor([self.tokens], dtype=torch.float64)]))
            self.sums, self.tokens = red[: len(self.SLOTS)], int(red[len(self.SLOTS)])

    def __getitem__(self, slot: str) -> float:
        return float(self.sums[self.SLOTS.index(slot)])


def setup(s: Settings, teacher, corpus_files, eval_prompts, device) -> Run:
    """Read the corpus, build the student and its optimizer; fails here on bad input, before any step."""
    import torch

    from orthrus.models.files import resolve_checkpoint

    corpus = Corpus(corpus_files, s, verbose=True)
    if eval_prompts is not None and not Path(eval_prompts).is_file():
        raise MissingInputError(f"eval prompts not found: {eval_prompts}")
    torch.manual_seed(s.seed)
    teacher_dir = resolve_checkpoint(teacher)
    model, tok = load_student(teacher_dir, s, device)
    params = model.diffusion_parameters()
    n_train, n_all = sum(p.numel() for p in params), sum(p.numel() for p in model.parameters())
    world = dist.world()
    dist.log(
        f"student: {n_all / 1e6:.2f}M parameters, {n_train / 1e6:.2f}M trainable "
        f"({100 * n_train / n_all:.1f}%), K={model.block_size}, mask token {model.mask_token_id}, "
        f"device {device}, world {world}"
    )
    G = s.batch_size * s.grad_accum * world
    batches = GlobalBatches(corpus, G, s)
    if batches.per_epoch == 0:
        raise InputError(
            f"the corpus has {len(corpus)} usable sequences, fewer than one global batch "
            f"(batch_size {s.batch_size} x grad_accum {s.grad_accum} x world {world} = {G})"
        )
    total = int(s.max_steps) if s.max_steps is not None else batches.per_epoch * int(s.epochs)
    if 0 < s.warmup_steps >= total:
        raise InputError(
            f"warmup_steps {s.warmup_steps} is not below the run's {total} optimizer steps "
            f"({batches.per_epoch} per epoch of {len(corpus)} sequences, global batch {G}): the learning "
            "rate would never leave warm-up; lower warmup_steps, or raise epochs or max_steps"
        )
    dist.log(f"{total} optimizer steps ({batches.per_epoch} per epoch, global batch {G} sequences)")
    opt, sched = make_optimizer(params, s, total)
    autocast_dtype = torch.bfloat16 if (device.type == "cuda" and s.bf16) else None
    runner = dist.wrap(step_module(model, s.objective, float(s.kl_weight), autocast_dtype), device)
    return Run(
        s=s,
        device=device,
        corpus=corpus,
        batches=batches,
        model=model,
        tokenizer=tok,
        params=params,
        weights=offset_weights(s.offset_weights, model.block_size),
        runner=runner,
        opt=opt,
        sched=sched,
        total=total,
        teacher_dir=teacher_dir,
        n_all=n_all,
        n_train=n_train,
        pad_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
    )


def train_step(run: Run, step: int) -> tuple[StepSums, float, float]:
    """Optimizer step `step` (0-based): this process' micro-batches of the global batch, their
    gradients accumulated (DDP syncs on the last), clipped, applied. Returns (sums, grad norm, lr)."""
    import torch

    s, corpus, rank, world = run.s, run.corpus, dist.rank(), dist.world()
    epoch, gb = run.batches[step]
    plan = [corpus.anchors(int(i), epoch, s) for i in gb]
    # every process divides by the loss weight of the whole global batch and DDP averages over
    # processes (hence * world): the loss is the mean over every target token of the step
    w_global = sum(n_weighted(corpus.lengths[i], a, run.weights) for i, a in zip(gb, plan))
    sums = StepSums()
    for acc_i in range(s.grad_accum):
        m = acc_i * world + rank
        sel = slice(m * s.batch_size, (m + 1) * s.batch_size)
        idx = gb[sel]
        batch = make_batch(
            [corpus.ids[i] for i in idx],
            plan[sel],
            run.model.block_size,
            run.weights,
            run.model.mask_token_id,
            run.pad_id,
        )
        with dist.no_sync(run.runner, sync=acc_i == s.grad_accum - 1):
            loss_sum, st = run.runner(batch)
            (loss_sum * (world / w_global)).backward()
        sums.add(loss_sum, st, int(sum(len(corpus.ids[i]) for i in idx)))
    sums.reduce()
    gnorm = float("nan")
    if s.grad_clip:
        gnorm = float(torch.nn.utils.clip_grad_norm_(run.params, s.grad_clip))
    lr = run.opt.param_groups[0]["lr"]
    run.opt.step()
    run.sched.step()
    run.opt.zero_grad(set_to_none=True)
    return sums, gnorm, lr


def train(
    settings: dict | Settings,
    teacher,
    corpus_files,
    out_dir,
    eval_prompts=None,
    threads: int | None = None,
    progress: bool = True,
    on_step=None,
    device: str = "auto",
) -> dict:
    """Train the diffusion view of `teacher` on the corpus; write the model to `out_dir`, on
    `device` (orthrus.distill.dist.init: auto, cpu or cuda).

    `on_step(step, row)` is called after every optimizer step (and after its checkpoint);
    raising from it interrupts the run (used to test resumption). Returns the summary dict.
    """
    import torch
    from tqdm import tqdm

    s = resolve_settings(settings)
    if threads:
        torch.set_num_threads(int(threads))
    t_start = time.perf_counter()
    device, started_pg = dist.init(device)
    out_dir = Path(out_dir)
    ckpt_path = resume.checkpoint_dir(out_dir) / "last"
    try:
        run = setup(s, teacher, corpus_files, eval_prompts, device)
        fp = resume.fingerprint(s, run.corpus, run.teacher_dir, dist.world())
        state = resume.restore(ckpt_path, fp, run.total, run.model, run.opt, run.sched, device)
        if state is None:
            state = {"step": 0, "elapsed": 0.0, "tokens": 0, "loss_tokens": 0.0, "log": [], "eval": []}
        if eval_prompts is not None and s.eval_per_domain > 0 and dist.rank() == 0:
            run.eval_set = eval_prompt_ids(eval_prompts, run.tokenizer, s.eval_per_domain)
        live_log = LiveLog(ckpt_path.parent, state["log"], dist.rank())
        bar = tqdm(
            total=run.total,
            initial=state["step"],
            desc="train",
            unit="step",
            file=sys.stderr,
            disable=not progress or dist.rank() != 0,
            dynamic_ncols=True,
        )
        t_seg = time.perf_counter()
        while state["step"] < run.total:
            step = state["step"]
            sums, gnorm, lr = train_step(run, step)
            now = time.perf_counter()
            state["elapsed"] += now - t_seg
            t_seg = now
            row = _count_step(state, sums, gnorm, lr)
            if step == 0 or (step + 1) % max(1, s.log_every) == 0 or step + 1 == run.total:
                state["log"].append(row)
                live_log.append(row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['acc']:.2f}", lr=f"{lr:.1e}")
            bar.update(1)
            if s.eval_every and (step + 1) % s.eval_every == 0 and step + 1 < run.total:
                _evaluate(run, state, step + 1)
                t_seg = time.perf_counter()  # evaluation time is not training time
            if s.save_every and (step + 1) % s.save_every == 0 and step + 1 < run.total:
                if dist.rank() == 0:
                    resume.save(ckpt_path, fp, state, run.model, run.opt, run.sched, device)
                dist.barrier()
                t_seg = time.perf_counter()
            if on_step is not None:
                on_step(step + 1, row)
        bar.close()
        return _finish(run, state, teacher, out_dir, t_start)
    finally:
        if started_pg:
            dist.destroy()


def _count_step(state: dict, sums: StepSums, gnorm: float, lr: float) -> dict:
    """Add a finished step to the running totals of `state`; returns its log row."""
    state["step"] += 1
    state["tokens"] += sums.tokens
    state["loss_tokens"] += sums["weight"]
    W = sums["weight"]
    return {
        "step": state["step"],
        "loss": sums["loss"] / W,
        "lr": lr,
        "tokens": state["tokens"],
        "seconds": round(state["elapsed"], 3),
        "loss_tokens": state["loss_tokens"],
        "ce": sums["ce"] / W,
        "kl": sums["kl"] / W,
        "acc": sums["acc"] / W,
        "grad_norm": gnorm,
    }


def _evaluate(run: Run, state: dict, step: int) -> None:
    """Held-out TPF at `step` on rank 0 (the only one holding the prompts); the others wait."""
    if run.eval_set is not None:
        rows = evaluate_tpf(run.model, run.eval_set, run.s.eval_max_new_tokens, step)
        state["eval"] += rows
        log_eval(rows, step)
    dist.barrier()


def _finish(run: Run, state: dict, teacher, out_dir: Path, t_start: float) -> dict:
    """The final evaluation (unless the last step had one), the summary and the outputs."""
    s, train_seconds = run.s, state["elapsed"]
    if not state["eval"] or state["eval"][-1]["step"] != run.total:
        _evaluate(run, state, run.total)
    summary = {
        "settings": s.as_dict(),
        "teacher": str(teacher),
        "corpus": [str(f) for f in run.corpus.files],
        "counts": run.corpus.counts,
        "skipped_by_domain": run.corpus.skipped_by_domain,
        "world_size": dist.world(),
        "global_batch": run.batches.size,
        "steps": run.total,
        "steps_per_epoch": run.batches.per_epoch,
        "train_seconds": round(train_seconds, 2),
        "wall_seconds": round(time.perf_counter() - t_start, 2),
        "tokens": state["tokens"],
        "loss_tokens": state["loss_tokens"],
        "loss_tokens_per_second": state["loss_tokens"] / train_seconds if train_seconds else None,
        "final": state["log"][-1] if state["log"] else None,
        "parameters": run.n_all,
        "trainable_parameters": run.n_train,
        "block_size": run.model.block_size,
        "mask_token_id": run.model.mask_token_id,
        "device": str(run.device),
        "eval": [r for r in state["eval"] if r["step"] == run.total],
    }
    if dist.rank() == 0:
        write_outputs(out_dir, run.model, state, summary)
        if not s.keep_checkpoint:
            shutil.rmtree(resume.checkpoint_dir(out_dir), ignore_errors=True)
        dist.log(
            f"saved {out_dir} after {run.total} steps, {train_seconds:.1f}s training "
            f"({summary['loss_tokens_per_second'] or 0:.0f} loss tokens/s)"
        )
    dist.barrier()
    return summary


# --------------------------------------------------------------------------- CLI


def cli_settings(config: str | None, model: str | None) -> dict:
    """The settings that `--config` and `--model` name: `--config` alone is the variant's own
    settings (a YAML/JSON file or inline JSON, as the workflow passes them); with `--model NAME`
    it is a full config file and the settings are its `models: {NAME: ...}`."""
    from orthrus.config import load_config

    if model and not config:
        raise InputError("--model needs --config FILE (a config with `models:`)")
    cfg = load_config(config)
    if not model:
        if "models" in cfg:
            raise InputError(f"{config}: a config with `models:`; name the variant with --model NAME")
        return cfg
    models = cfg.get("models")
    if not isinstance(models, dict):
        raise InputError(f"{config}: no `models:` mapping")
    if model not in models:
        raise InputError(f"{config}: no model {model!r} under `models:` (have {sorted(models)})")
    return dict(models[model] or {})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus train", description="Distil the diffusion view of an Orthrus model.")
    ap.add_argument("--teacher", required=True, help="teacher (Qwen3) directory or hub id")
    ap.add_argument("--corpus", required=True, nargs="+", help="teacher corpus shard(s) (Parquet)")
    ap.add_argument(
        "--config",
        help="the variant's settings (YAML/JSON file or inline JSON); "
        "with --model, a config file with `models: {NAME: {settings}}`",
    )
    ap.add_argument("--model", help="the variant NAME under the config's `models:`")
    ap.add_argument("--out", required=True, help="output model directory (written atomically)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads per process")
    ap.add_argument("--eval-prompts", default=None, help="held-out prompt set for TPF (Parquet)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a setting; keys: {', '.join(DEFAULTS)}",
    )
    ap.add_argument(
        "--device",
        default="auto",
        help="auto (CUDA where there is one: one process per GPU under torchrun) | cpu | cuda | mps",
    )
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.no_progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    from orthrus.config import apply_sets

    settings = apply_sets(cli_settings(args.config, args.model), args.set)
    train(
        settings,
        args.teacher,
        args.corpus,
        args.out,
        eval_prompts=args.eval_prompts,
        threads=args.threads,
        progress=not args.no_progress,
        device=args.device,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
