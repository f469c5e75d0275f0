"""Resuming a killed run: the checkpoint's content, when it fits this run, and saving it.

Stored through `orthrus.models.checkpoint` (safetensors + JSON, no pickle) in `OUT.ckpt/last/`. A
checkpoint fits when its fingerprint (the training settings, the teacher's and the corpus'
file contents, the world size) equals this run's and its step is not past this run's total;
anything else starts afresh, saying what changed.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from orthrus.distill.dist import log
from orthrus.models import checkpoint as store


def checkpoint_dir(out_dir: Path) -> Path:
    """`OUT.ckpt`: beside the output, so that the atomic write of OUT never touches it."""
    return out_dir.with_name(out_dir.name + ".ckpt")


def fingerprint(s, corpus, teacher_dir, world: int) -> dict:
    """What a checkpoint's weights depend on, by content: a resumed run must see the same."""
    return {
        "settings": s.training_dict(),
        "teacher": store.model_digests(teacher_dir),
        "corpus": [store.file_digest(f) for f in corpus.files],
        "world": world,
    }


def save(path: Path, fp: dict, state: dict, model, opt, sched, device) -> None:
    """Write the diffusion weights, optimizer, scheduler, every RNG and `state` (rank 0 only)."""
    import torch

    ck = {
        "fingerprint": fp,
        "step": state["step"],
        "state": state,
        "diffusion": {
            n: p.detach().cpu().clone() for n, p in model.named_parameters() if model.is_diffusion_parameter(n)
        },
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        },
    }
    store.save(path, ck)


def restore(path: Path, fp: dict, total: int, model, opt, sched, device) -> dict | None:
    """Load the checkpoint at `path` into model, optimizer, scheduler and RNGs when it fits this
    run; returns its training state, or None (start afresh)."""
    import torch

    if (path.parent / "last.pt").exists():
        log(f"ignoring {path.parent / 'last.pt'}: pickled checkpoints are no longer read")
    if not (path / "state.json").is_file():
        return None
    ck = store.load(path)
    changed = [k for k in fp if ck["fingerprint"].get(k) != fp[k]]
    if changed or ck["step"] > total:
        why = f"changed: {', '.join(changed)}" if changed else f"its step {ck['step']} is past {total}"
        log(f"fresh start: checkpoint {path} does not fit this run ({why})")
        return None
    own = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in ck["diffusion"].items():
            own[k].copy_(v)
    opt.load_state_dict(ck["optimizer"])
    sched.load_state_dict(ck["scheduler"])
    torch.set_rng_state(ck["rng"]["torch"])
    np.random.set_state(ck["rng"]["numpy"])
    random.setstate(ck["rng"]["python"])
    if torch.cuda.is_available() and ck["rng"].get("cuda") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(ck["rng"]["cuda"], device)
    log(f"resumed from {path} at step {ck['state']['step']}")
    return ck["state"]
