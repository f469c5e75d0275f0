"""Data parallel plumbing: which process this is, joining the process group, and talking from rank 0.

Launched by torchrun, every process trains on its share of each global batch and DDP averages
the diffusion gradients (gloo on CPU, nccl on CUDA); launched plainly, everything here is a
no-op for a world of one.
"""

from __future__ import annotations

import contextlib
import os
import sys


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def log(msg: str) -> None:
    """A progress line on stderr, from rank 0 only (the others would repeat it)."""
    if rank() == 0:
        print(f"[train] {msg}", file=sys.stderr, flush=True)


def init(device: str = "auto"):
    """Join the process group when launched by torchrun; returns (device, started_here).
    `device`: `auto` takes CUDA where there is one (a process per GPU under torchrun, the
    paper's 8-GPU distillation), `cpu` keeps to the CPU on a GPU machine too (the study's device is
    the CPU: its distillation must not move to a GPU the decoding never sees), `cuda` demands one,
    `mps` takes an Apple GPU (decode.device's choices)."""
    import torch
    import torch.distributed as dist

    from orthrus.errors import InputError

    if device not in ("auto", "cpu", "mps") and not device.startswith("cuda"):
        raise InputError(f"training device must be auto, cpu, cuda or mps, got {device!r}")
    if device == "mps":  # one Apple GPU, no process group
        return torch.device("mps"), False
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"training device {device!r} asked for, but torch sees no CUDA device here")
    cuda = device != "cpu" and torch.cuda.is_available()
    started = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized()
    if started:
        dist.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        # one process per GPU under torchrun; a single process keeps the index it was given (cuda:N)
        index = os.environ.get("LOCAL_RANK") or (device.partition(":")[2] if device.startswith("cuda") else "") or "0"
        device = torch.device("cuda", int(index))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return device, started


def destroy() -> None:
    import torch.distributed as dist

    dist.destroy_process_group()


def barrier() -> None:
    if world() > 1:
        import torch.distributed as dist

        dist.barrier()


def all_reduce_sum(t):
    """`t` summed over every process, in place (a world of one: `t` itself)."""
    if world() > 1:
        import torch.distributed as dist

        if dist.get_backend() == "nccl" and t.device.type != "cuda":
            # NCCL (the group on GPUs) reduces device tensors only; the step's sums live on the host
            on_device = t.cuda()  # this process's GPU (init sets it)
            dist.all_reduce(on_device)
            t.copy_(on_device.cpu())
        else:
            dist.all_reduce(t)
    return t


def wrap(module, device):
    """`module` under DDP when there are several processes."""
    if world() == 1:
        return module
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(module, device_ids=[device.index] if device.type == "cuda" else None)


def no_sync(runner, sync: bool):
    """DDP's gradient all-reduce is only needed on the last micro-batch of a step."""
    if world() > 1 and not sync:
        return runner.no_sync()
    return contextlib.nullcontext()
