"""`orthrus gguf-export`: a Hugging Face model directory as a GGUF file, by llama.cpp's own converter.

    orthrus gguf-export --model-path results/teacher --outtype f32 --converter .llamacpp/convert
                        --out results/gguf/teacher-f32.gguf

The converter is the one vendored with the server (`convert_hf_to_gguf.py` and its `gguf-py`,
copied by envs/build-llamacpp.sh), run in this process with two departures, both about text
tokenization, which the study never asks of the server (it sends and reads token ids):
  - a model without `tokenizer.model` is not offered to SentencePiece (the converter tries it first
    for Qwen, and fails when the package is absent rather than when the file is);
  - a BPE pre-tokenizer the converter does not know (the tiny world's) is written as llama.cpp's
    `default` instead of refused.
The weights, their layout and the vocabulary's ids are the converter's own. The file is written
beside its destination and renamed into place: a killed job leaves no GGUF that looks complete.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

OUTTYPES = ("f32", "bf16", "f16")


def _load_converter(converter: Path):
    script = converter / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise FileNotFoundError(f"no llama.cpp converter at {script} (build it: bash envs/build-llamacpp.sh)")
    sys.path[:0] = [str(converter / "gguf-py"), str(converter)]  # its own gguf, as the script does itself
    spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from conversion import base

    create = base.TextModel._create_vocab_sentencepiece
    pre = base.TextModel.get_vocab_base_pre

    def create_vocab_sentencepiece(self):
        if not (self.dir_model / "tokenizer.model").is_file():
            raise FileNotFoundError(f"File not found: {self.dir_model / 'tokenizer.model'}")
        return create(self)

    def get_vocab_base_pre(self, tokenizer) -> str:
        try:
            return pre(self, tokenizer)
        except NotImplementedError:
            print("[gguf-export] BPE pre-tokenizer unknown to the converter: written as 'default'", file=sys.stderr)
            return "default"

    base.TextModel._create_vocab_sentencepiece = create_vocab_sentencepiece
    base.TextModel.get_vocab_base_pre = get_vocab_base_pre
    return module


def export(model_path: str, outtype: str, converter: str, out: str) -> None:
    if outtype not in OUTTYPES:
        raise ValueError(f"--outtype {outtype!r}, not one of {', '.join(OUTTYPES)}")
    module = _load_converter(Path(converter))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = f"{out}.tmp-{os.getpid()}"
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", model_path, "--outtype", outtype, "--outfile", tmp]
    try:
        module.main()
        os.replace(tmp, out)
    finally:
        sys.argv = argv
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv: list[str] | None = None) -> int:
    from orthrus.errors import InputError

    ap = argparse.ArgumentParser(prog="orthrus gguf-export", description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", required=True, help="the Hugging Face model directory")
    ap.add_argument("--outtype", required=True, choices=OUTTYPES)
    ap.add_argument(
        "--converter", required=True, help="the converter's folder (envs/build-llamacpp.sh: .llamacpp/convert)"
    )
    ap.add_argument("--out", required=True, help="the GGUF file")
    args = ap.parse_args(argv)
    try:
        export(args.model_path, args.outtype, args.converter, args.out)
    except FileNotFoundError as e:
        raise InputError(str(e)) from None
    print(f"[gguf-export] {args.model_path} as {args.outtype} -> {args.out}", file=sys.stderr)
    return 0
