"""Distillation of the diffusion view: train only `*_proj_diff` / `*_norm_diff` of an Orthrus model.

`orthrus train --teacher DIR_OR_HUB_ID --corpus SHARD.parquet [SHARD ...] --config SETTINGS
 [--model NAME] --out DIR [--threads N] [--eval-prompts eval.parquet] [--set key=value ...]
 [--no-progress]`

SETTINGS is the variant's settings mapping (a YAML/JSON file, or inline JSON as the workflow
passes it); with `--model NAME` it is instead a config file holding `models: {NAME: {settings}}`.
The settings override `DEFAULTS` (`settings.py`; unknown keys are rejected, naming them). In
Python: `orthrus.distill.train.train(settings, teacher, corpus_files, out_dir)`.
Data parallel: `torchrun --nproc_per_node N -m orthrus.cli train ...` (DDP over the
diffusion parameters; gloo on CPU, nccl on CUDA).

One training step, per sequence `ids = prompt_ids + response_ids` (truncated to `max_len`):

1. One frozen AR forward (no gradients, `use_cache=True`) over the whole sequence gives the
   per-layer keys/values (and, for the KL objective, the AR view's distributions).
2. `blocks_per_seq` anchors `a` are drawn inside the response. Block b is
   `[x_a, M, ..., M]` (K tokens) at positions `a..a+K-1`; all blocks of a sequence go through
   ONE `diffusion_forward` with a block-sparse additive mask: block b sees the AR keys at
   positions `<= a-1` and its own K keys (bidirectionally), nothing else. Slot i is trained to
   predict token `a+i+1` (targets past the end of the sequence are skipped).

Objectives: `ce` (cross-entropy on the teacher's tokens), `kl` (forward KL(p_AR || q_diff)
to the frozen AR view's distribution at the same position), `mix` ((1-kl_weight)*ce +
kl_weight*kl). The loss is the weighted mean over every target token of the global batch
(`batch_size * grad_accum * world_size` sequences), whatever the number of processes.

Outputs: `DIR` (written atomically) holds the `save_pretrained` model and tokenizer,
`train_log.csv` / `train_log.jsonl` (step, loss, lr, tokens, seconds, ...), `eval_log.csv`
(held-out tokens per forward with the real `orthrus.generate` loop) and `train_summary.json`.
Checkpoints (diffusion weights, optimizer, scheduler, RNG, data position) go to
`DIR.ckpt/last/` (safetensors + JSON, no pickle: orthrus/models/checkpoint.py) every `save_every`
steps; a rerun with the same settings, the same teacher files and the same corpus content
resumes from there (anything else starts afresh, saying what changed), and the directory is
removed after a successful run unless `keep_checkpoint`.

Modules, in the order a run uses them:

- `settings.py`   `Settings` (defaults, types, checks), `DEFAULTS`, `offset_weights`.
- `dist.py`       rank, world, process group, DDP wrapping, rank-0 logging.
- `data.py`       `Corpus`, `epoch_batches` / `GlobalBatches`, `make_batch`.
- `student.py`    `load_student`, the AdamW optimizer and learning-rate schedule.
- `loss.py`       `block_loss`, the single-pass objective (`step_module`: what DDP wraps).
- `reference.py`  `blockwise_loss`, the same loss one block at a time (tests, benchmark).
- `resume.py`     checkpoint fingerprint, save and restore.
- `evaluate.py`   held-out tokens per forward during training.
- `outputs.py`    the live log and the output directory.
- `loop.py`       `train()` and `main()`.
"""
