"""The zoo's subjects, each in a form its releases read, all from the shipped tiny world.

- `qwen3`: the shipped teacher and draft as they are (orthrus/world/subject).
- `llama`: their Llama-architecture twins, for releases that predate Qwen3 (transformers 4.44 has no
  Qwen3): the same weights with the per-head q/k norms left out, which is the one piece Llama lacks, so a
  twin is another model of the same world and tokenizer, not the teacher; every release reads it, and
  the judge compares a release with the twin itself, never with the teacher.
- `llama_gguf`: the twin as a GGUF file for llama-cpp-python (orthrus.zoo.gguf_subject).
- `mtp`: a tiny model with a multi-token-prediction layer (orthrus.zoo.subject_mtp).

    orthrus zoo subject KIND OUT_DIR
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from orthrus.world.subject import model_dir

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
LLAMA_DROPS = ("self_attn.q_norm.", "self_attn.k_norm.")


def llama_config(qwen: dict) -> dict:
    """A LlamaConfig every release since 4.3x reads: the keys Llama shares with the shipped Qwen3 and
    rope_theta in the old spelling (rope_parameters came with transformers 5)."""
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
            "rms_norm_eps", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "eos_token_id",
            "pad_token_id", "hidden_act")  # fmt: skip
    cfg = {k: qwen[k] for k in keys}
    assert qwen["head_dim"] * qwen["num_attention_heads"] == qwen["hidden_size"], "Llama before 4.45 infers head_dim"
    rope = (qwen.get("rope_parameters") or {}).get("rope_theta", qwen.get("rope_theta", 10000.0))
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", rope_theta=rope, bos_token_id=None,
               attention_bias=False, mlp_bias=False, torch_dtype="float32", use_cache=True)  # fmt: skip
    return cfg


def llama_twin(out: Path, which: str = "teacher") -> Path:
    """The shipped model `which` as a Llama directory (safetensors, no code): deterministic bytes."""
    from safetensors.torch import load_file, save_file

    src = model_dir(which)
    out.mkdir(parents=True, exist_ok=True)
    qwen = json.loads((src / "config.json").read_text())
    tensors = load_file(src / "model.safetensors")
    kept = {k: v.contiguous() for k, v in tensors.items() if not any(d in k for d in LLAMA_DROPS)}
    save_file(kept, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(llama_config(qwen), indent=2, sort_keys=True) + "\n")
    eos = qwen["eos_token_id"]
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos, "pad_token_id": qwen["pad_token_id"]}) + "\n"
    )
    for f in TOKENIZER_FILES:
        shutil.copy(src / f, out / f)
    return out


def prompt_ids(which: int | list[str]) -> list[dict]:
    """The tiny world's first eval prompt of each of the first `which` domains (or the prompts `which`
    names), chat-rendered by the world's tokenizer (every subject shares it): token ids, the same for
    every release."""
    from transformers import AutoTokenizer

    from orthrus.chat import render_chat
    from orthrus.data.prompts import tiny_prompts

    df, _, _ = tiny_prompts(seed=0, eval_per_domain=1, distill_n=0)
    tok = AutoTokenizer.from_pretrained(model_dir("teacher"))
    rows = df.head(which) if isinstance(which, int) else df[df["prompt_id"].isin(which)]
    return [{"id": r.prompt_id, "ids": render_chat(tok, r.prompt)} for r in rows.itertuples()]


def copy_shipped(out: Path, which: str) -> Path:
    shutil.copytree(model_dir(which), out, dirs_exist_ok=True)
    return out


def build(kind: str, out: Path) -> dict:
    """The subject `kind` under `out` (teacher/ and draft/, or its one file); its paths, {teacher, draft}."""
    out = Path(out)
    if kind == "qwen3":
        return {w: str(copy_shipped(out / w, w)) for w in ("teacher", "draft")}
    if kind == "llama":
        return {w: str(llama_twin(out / w, w)) for w in ("teacher", "draft")}
    if kind == "llama_gguf":
        from orthrus.zoo.gguf_subject import llama_gguf

        hf = {w: llama_twin(out / "hf" / w, w) for w in ("teacher", "draft")}
        return {w: str(llama_gguf(hf[w], out / f"{w}.gguf")) for w in hf} | {"hf_teacher": str(hf["teacher"])}
    if kind == "mtp":
        from orthrus.zoo.subject_mtp import mtp_subject

        return {"teacher": str(mtp_subject(out / "teacher")), "draft": None}
    raise ValueError(f"unknown subject {kind!r}")
