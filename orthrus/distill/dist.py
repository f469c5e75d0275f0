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


def init():
    """Join the process group when launched by torchrun; returns (device, started_here)."""
    import torch
    import torch.distributed as dist

    started = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized()
    if started:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
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
