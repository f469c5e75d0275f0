"""A model directory's files, checked before transformers reads them: where a path or hub id is,
which model family its config names, what is wrong with its weights files. No model code: the
loaders and the Orthrus classes (orthrus/models/modeling.py) share these."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orthrus.errors import MissingInputError, ModelError
from orthrus.models.hub import is_hub_id, split_revision

# Only these files are ever fetched from the hub: never code, never pickles unless opted in.
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]


def config_model_type(path) -> str | None:
    """`model_type` of a model directory's config.json (None where it has none or cannot be read:
    check_model_files has named what is wrong with it)."""
    try:
        return json.loads((Path(path) / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def resolve_checkpoint(path_or_id, allow_pickle: bool = False, revision: str | None = None) -> str:
    """A local directory, or a hub snapshot (at `revision`, or the `@REV` of `owner/name@REV`)
    holding only configs, tokenizers and safetensors; its files checked (`check_model_files`)."""

    path_or_id, pinned = split_revision(path_or_id)
    revision = revision or pinned
    path = Path(os.path.expanduser(str(path_or_id)))
    if not path.is_dir():
        if not is_hub_id(path_or_id):
            raise MissingInputError(f"model path does not exist: {path_or_id}")
        from huggingface_hub import snapshot_download

        patterns = _HUB_PATTERNS + (["*.bin"] if allow_pickle else [])
        path = Path(snapshot_download(str(path_or_id), allow_patterns=patterns, revision=revision))
    check_model_files(path, allow_pickle)
    return str(path)


def check_model_files(path, allow_pickle: bool = False) -> None:
    """Say in one line what is wrong with a model directory's files before transformers reads
    them (its own messages about a missing config or a truncated file point elsewhere)."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise MissingInputError(f"{path}: no config.json (not a model directory)") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelError(f"{path / 'config.json'}: not valid JSON ({e})") from None
    weights = sorted(path.glob("*.safetensors"))
    if not weights and not (allow_pickle and any(path.glob("*.bin"))):
        raise MissingInputError(
            f"{path}: no *.safetensors weights"
            + ("" if allow_pickle else " (pickled .bin weights need allow_pickle=True)")
        )
    for f in weights:
        try:
            with safe_open(f, framework="pt"):
                pass
        except SafetensorError as e:  # a cut-off download or copy: the header promises more than the file holds
            raise ModelError(f"{f}: truncated or corrupt safetensors file ({e})") from None


def non_float_tensors(path, with_file: bool = False) -> list[str]:
    """Tensors of the checkpoint's safetensors files stored as integers or bools (transformers casts
    them to the load dtype without a word); headers only. `with_file`: each as `FILE:NAME (DTYPE)`."""
    from safetensors import safe_open

    bad = []
    for f in sorted(Path(path).glob("*.safetensors")):
        with safe_open(f, framework="pt") as handle:
            for k in handle.keys():
                dtype = handle.get_slice(k).get_dtype()
                if not dtype.startswith(("F", "BF")):
                    bad.append(f"{f.name}:{k} ({dtype})" if with_file else k)
    return sorted(bad)


def check_finite(model, source) -> None:
    """Raise naming the first weight that holds NaN or inf: such a model decodes garbage silently."""
    import torch

    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ModelError(f"{source}: weight {name} holds non-finite values (NaN or inf)")
