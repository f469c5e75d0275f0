"""The zoo's Llama twin (orthrus.zoo.subjects.llama_twin) as a GGUF file that old llama.cpp builds read.

llama-cpp-python 0.3.0 and 0.3.1 vendor a llama.cpp of September 2024: it has no Qwen3, and its
converter is not installed with the package. orthrus.engines.gguf_export runs the converter of the
project's newer llama.cpp, which is not here either, so the twin is written with the `gguf` package
directly: a Llama-architecture file needs nothing else than the keys and tensor names below, and
writing them ourselves keeps the subject independent of any release's converter (the release under
test only reads it).

Two things the writer must get right, both checked by tests/test_zoo_llama_cpp.py:
  - Rotary pairs. Hugging Face's Llama rotates dimension i of a head with i + d/2 (rotate_half);
    llama.cpp's Llama (rope type "norm") rotates 2i with 2i + 1. The q and k projections' rows are
    therefore reordered per head, which makes llama.cpp's attention scores equal the twin's.
  - The vocabulary. llama.cpp takes n_vocab from the token list, so the list has exactly as many
    entries as the embedding has rows: the tokenizer's own tokens, then unused fillers. The zoo
    feeds token ids, never text, so the vocabulary only has to load (a byte-level BPE with merges,
    the pre-tokenizer written as llama.cpp's `default`).

    python -m orthrus.zoo.gguf_subject HF_DIR OUT.gguf [--dtype f32|f16]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

DTYPES = {"f32": (np.float32, 0), "f16": (np.float16, 1)}  # numpy dtype, GGUF general.file_type
# llama.cpp token types (llama_token_type): what each vocabulary entry is to the loader
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
LAYER_NAMES = {  # Hugging Face Llama layer tensor -> llama.cpp's name for it
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def rope_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """A q or k projection with each head's rows reordered from rotate_half pairs (i, i + d/2) to
    adjacent pairs (2i, 2i + 1): the same attention scores under llama.cpp's "norm" rotary."""
    d = weight.shape[0] // n_head
    half = np.arange(d // 2)
    within = np.empty(d, dtype=np.int64)
    within[0::2], within[1::2] = half, half + d // 2  # new row 2i reads old row i, 2i + 1 reads i + d/2
    order = (np.arange(n_head)[:, None] * d + within[None, :]).reshape(-1)
    return weight[order]


def gguf_name(hf_name: str) -> str:
    """llama.cpp's tensor name for a Hugging Face Llama tensor (ValueError for one it does not have)."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}  # fmt: skip
    if hf_name in fixed:
        return fixed[hf_name]
    parts = hf_name.split(".", 3)  # model, layers, i, rest
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in LAYER_NAMES:
        return f"blk.{int(parts[2])}.{LAYER_NAMES[parts[3]]}"
    raise ValueError(f"{hf_name}: not a Llama tensor (a Qwen3 q/k norm? write the Llama twin first)")


def gguf_tensors(tensors: dict[str, np.ndarray], cfg: dict, dtype: str) -> dict[str, np.ndarray]:
    """The twin's tensors under llama.cpp's names, q/k rows reordered, matrices in `dtype` and the
    1-D norms in f32 (llama.cpp's norms read f32). A tied model gets its embedding as output.weight
    written out, so the file does not rely on the loader's fallback."""
    out = {}
    for name, w in tensors.items():
        w = np.asarray(w, dtype=np.float32)
        if name.endswith("q_proj.weight"):
            w = rope_rows(w, cfg["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = rope_rows(w, cfg["num_key_value_heads"])
        out[gguf_name(name)] = w if w.ndim == 1 else w.astype(DTYPES[dtype][0])
    if "output.weight" not in out:
        out["output.weight"] = out["token_embd.weight"]
    return out


def vocabulary(tokenizer: dict, n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens, their llama.cpp types and the merges of a byte-level BPE tokenizer.json, padded to
    the embedding's `n_vocab` rows with unused fillers."""
    model = tokenizer["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer model {model.get('type')!r}: the GGUF writer takes a byte-level BPE")
    tokens = {i: t for t, i in model["vocab"].items()}
    types = dict.fromkeys(tokens, NORMAL)
    for added in tokenizer.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = CONTROL if added.get("special") else USER_DEFINED
    if max(tokens) >= n_vocab:
        raise ValueError(f"token id {max(tokens)} beyond the embedding's {n_vocab} rows")
    names = [tokens.get(i, f"[UNUSED{i}]") for i in range(n_vocab)]
    kinds = [types.get(i, UNUSED) for i in range(n_vocab)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return names, kinds, merges


def write_hparams(writer, cfg: dict, name: str, file_type: int) -> None:
    """The Llama keys llama.cpp of September 2024 reads (head_dim stated, not inferred)."""
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    writer.add_name(name)
    writer.add_file_type(file_type)
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    writer.add_vocab_size(cfg["vocab_size"])


def write_vocab(writer, tokenizer: dict, cfg: dict) -> None:
    """The tokenizer keys: gpt2-style BPE, no BOS added (the zoo's prompts are ids without one)."""
    tokens, types, merges = vocabulary(tokenizer, cfg["vocab_size"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    eos = cfg.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if eos is not None:
        writer.add_eos_token_id(int(eos))
    if cfg.get("pad_token_id") is not None:
        writer.add_pad_token_id(int(cfg["pad_token_id"]))
    writer.add_add_bos_token(False)


def read_twin(hf_dir: Path) -> tuple[dict, dict, dict[str, np.ndarray]]:
    """config.json, tokenizer.json and the safetensors weights of a Llama directory."""
    from safetensors.numpy import load_file

    cfg = json.loads((hf_dir / "config.json").read_text())
    if cfg.get("model_type") != "llama":
        raise ValueError(f"{hf_dir}: model_type {cfg.get('model_type')!r}, the writer takes a Llama twin")
    tokenizer = json.loads((hf_dir / "tokenizer.json").read_text())
    return cfg, tokenizer, load_file(hf_dir / "model.safetensors")


def llama_gguf(hf_dir: str | Path, out_path: str | Path, dtype: str = "f32") -> Path:
    """The Llama directory `hf_dir` as the GGUF `out_path`, written beside it and renamed into place
    (a killed job leaves no file that looks complete); deterministic bytes for the same input."""
    import gguf

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}, not one of {', '.join(DTYPES)}")
    hf_dir, out_path = Path(hf_dir), Path(out_path)
    cfg, tokenizer, tensors = read_twin(hf_dir)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f"{out_path.name}.tmp-{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    try:
        write_hparams(writer, cfg, hf_dir.name, DTYPES[dtype][1])
        write_vocab(writer, tokenizer, cfg)
        for name, w in sorted(gguf_tensors(tensors, cfg, dtype).items()):
            writer.add_tensor(name, np.ascontiguousarray(w))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir", help="a Llama directory (orthrus.zoo.subjects.llama_twin)")
    ap.add_argument("out", help="the GGUF file to write")
    ap.add_argument("--dtype", default="f32", choices=tuple(DTYPES))
    args = ap.parse_args(argv)
    print(llama_gguf(args.hf_dir, args.out, args.dtype))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
