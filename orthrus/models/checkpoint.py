"""Training checkpoints without pickle, and content digests of the inputs they depend on.

A checkpoint is a directory written atomically: `tensors.safetensors` (weights, optimizer
moments, RNG states) and `state.json` (everything else, with each tensor replaced by its name).
Reading it never unpickles, so whoever can write `results/` cannot run code in the next job.

A checkpoint is resumed only when its inputs are the same *content*: the teacher's weight and
config files and the corpus shards are identified by their SHA-256. A file is hashed once: the
stage that writes it stores `{size, mtime_ns, sha256}` in `FILE.sha256` beside it, and a reader
trusts that record only while size and mtime still match.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np

SIDECAR = ".sha256"


# --------------------------------------------------------------------------- digests


def _sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def record_digest(path) -> str:
    """Hash `path` and store the digest beside it (called by the stage that wrote the file)."""
    st = os.stat(path)
    digest = _sha256(path)
    Path(f"{path}{SIDECAR}").write_text(json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}))
    return digest


def file_digest(path) -> str:
    """SHA-256 of a file's content: from its sidecar while that still describes the file, from
    the Hugging Face cache's blob name (the blob of a large file is named by its SHA-256), or
    computed (then not stored: the reader may not own the directory, e.g. a Snakemake input)."""
    st = os.stat(path)
    try:
        meta = json.loads(Path(f"{path}{SIDECAR}").read_text())
        if meta["size"] == st.st_size and meta["mtime_ns"] == st.st_mtime_ns:
            return meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    blob = os.path.basename(os.path.realpath(path))
    if os.path.islink(path) and re.fullmatch(r"[0-9a-f]{64}", blob):
        return blob
    return _sha256(path)


def _model_files(model_dir) -> list[Path]:
    return sorted(
        p for p in Path(model_dir).iterdir() if p.name == "config.json" or p.suffix in (".safetensors", ".bin")
    )


def model_digests(model_dir) -> dict:
    """{file name: digest} of a model directory's config and weights."""
    return {p.name: file_digest(p) for p in _model_files(model_dir)}


def record_model_digests(model_dir) -> None:
    for p in _model_files(model_dir):
        record_digest(p)


# --------------------------------------------------------------------------- checkpoints


def _pack(obj, tensors: dict, name: str):
    """A JSON-able copy of `obj`; tensors go to `tensors` under their path in the structure."""
    import torch

    if isinstance(obj, torch.Tensor):
        tensors[name] = obj.detach().cpu().contiguous().clone()
        return {"__tensor__": name}
    if isinstance(obj, np.ndarray):
        return {"__ndarray__": obj.tolist(), "dtype": str(obj.dtype)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, tuple):
        return {"__tuple__": [_pack(v, tensors, f"{name}/{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_pack(v, tensors, f"{name}/{i}") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: _pack(v, tensors, f"{name}/{k}") for k, v in obj.items()}
        # e.g. the optimizer's state keyed by parameter index: keep the key types
        return {"__items__": [[k, _pack(v, tensors, f"{name}/{k}")] for k, v in obj.items()]}
    return obj


def _unpack(obj, tensors: dict):
    if isinstance(obj, list):
        return [_unpack(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if "__ndarray__" in obj:
        return np.asarray(obj["__ndarray__"], dtype=obj["dtype"])
    if "__tuple__" in obj:
        return tuple(_unpack(v, tensors) for v in obj["__tuple__"])
    if "__items__" in obj:
        return {k: _unpack(v, tensors) for k, v in obj["__items__"]}
    return {k: _unpack(v, tensors) for k, v in obj.items()}


def save(directory, obj: dict) -> None:
    """Write `obj` (nested dicts, lists, tuples, numbers, strings, tensors, numpy arrays) atomically."""
    from safetensors.torch import save_file

    from orthrus.io import atomic_path

    tensors: dict = {}
    state = _pack(obj, tensors, "")
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        save_file(tensors, str(tmp / "tensors.safetensors"))
        (tmp / "state.json").write_text(json.dumps(state))


def load(directory) -> dict:
    """What `save` wrote; reads safetensors and JSON only."""
    from safetensors.torch import load_file

    directory = Path(directory)
    tensors = load_file(str(directory / "tensors.safetensors"))
    return _unpack(json.loads((directory / "state.json").read_text()), tensors)
