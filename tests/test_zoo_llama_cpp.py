"""The zoo's llama-cpp-python case: the GGUF writer (orthrus.zoo.gguf_subject) and the driver
(orthrus/zoo/drivers/llama_cpp_python.py).

The fast tests need neither llama.cpp nor a release: the writer round-trips through the `gguf`
reader, its rotary reordering is checked against both rotary conventions, and the driver's parsing
runs on its own. The tests that run a release need its environment, built by the zoo
(.zoo-envs/llama-cpp-python-0.3.0 and -0.3.1), and skip naming it when it is missing.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from orthrus.zoo import gguf_subject as gs

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "orthrus" / "zoo" / "drivers" / "llama_cpp_python.py"
TEACHER = ROOT / "orthrus" / "world" / "subject" / "teacher"
ENVS = ROOT / ".zoo-envs"


def load_driver():
    """The driver as a module: it is a standalone script, never imported by the package."""
    spec = importlib.util.spec_from_file_location("zoo_llama_cpp_driver", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drv = load_driver()


# --------------------------------------------------------------------------- a tiny Llama directory

CFG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 64,
    "vocab_size": 2112,
    "tie_word_embeddings": True,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def tiny_llama(path: Path) -> Path:
    """A random Llama directory with the world's tokenizer: the writer's input, in a second."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    h, f, v, d = CFG["hidden_size"], CFG["intermediate_size"], CFG["vocab_size"], 8
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for i in range(CFG["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                   p + "self_attn.q_proj.weight": (2 * d, h), p + "self_attn.k_proj.weight": (d, h),
                   p + "self_attn.v_proj.weight": (d, h), p + "self_attn.o_proj.weight": (h, 2 * d),
                   p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                   p + "mlp.down_proj.weight": (h, f)}  # fmt: skip
    path.mkdir(parents=True)
    save_file(
        {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}, str(path / "model.safetensors")
    )
    (path / "config.json").write_text(json.dumps(CFG))
    (path / "tokenizer.json").write_text((TEACHER / "tokenizer.json").read_text())
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The tiny Llama and its GGUF, read back by the `gguf` package's reader."""
    import gguf

    base = tmp_path_factory.mktemp("gguf")
    hf = tiny_llama(base / "hf")
    out = gs.llama_gguf(hf, base / "tiny.gguf")
    return hf, out, gguf.GGUFReader(str(out))


def field(reader, key):
    return reader.fields[key].contents()


# --------------------------------------------------------------------------- the writer


def test_gguf_round_trips_as_llama(written):
    hf, out, reader = written
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "general.file_type") == 0
    assert field(reader, "llama.block_count") == 2
    assert field(reader, "llama.attention.head_count_kv") == 1
    assert field(reader, "llama.rope.dimension_count") == 8
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.eos_token_id") == 2
    assert len(field(reader, "tokenizer.ggml.tokens")) == CFG["vocab_size"]  # llama.cpp's n_vocab
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}  # ggml order: (in, out)
    assert shapes["token_embd.weight"] == (16, 2112) == shapes["output.weight"]
    assert shapes["blk.1.attn_q.weight"] == (16, 16)
    assert shapes["blk.1.attn_k.weight"] == (16, 8)
    assert shapes["blk.0.ffn_down.weight"] == (24, 16)
    assert len(shapes) == 3 + 2 * 9
    assert not list(out.parent.glob("*.tmp-*"))


def test_gguf_tensors_carry_the_weights_reordered(written):
    from safetensors.numpy import load_file

    hf, _, reader = written
    w = load_file(str(hf / "model.safetensors"))
    data = {t.name: np.asarray(t.data).reshape(tuple(reversed([int(x) for x in t.shape]))) for t in reader.tensors}
    np.testing.assert_array_equal(data["blk.0.attn_v.weight"], w["model.layers.0.self_attn.v_proj.weight"])
    np.testing.assert_array_equal(data["output.weight"], w["model.embed_tokens.weight"])  # tied, written out
    q = w["model.layers.0.self_attn.q_proj.weight"]
    np.testing.assert_array_equal(data["blk.0.attn_q.weight"], gs.rope_rows(q, 2))
    assert not np.array_equal(data["blk.0.attn_q.weight"], q)


def test_gguf_bytes_are_deterministic(written, tmp_path):
    hf, out, _ = written
    again = gs.llama_gguf(hf, tmp_path / "again.gguf")
    assert again.read_bytes() == out.read_bytes()


def test_f16_keeps_norms_f32(written, tmp_path):
    import gguf

    hf, _, _ = written
    reader = gguf.GGUFReader(str(gs.llama_gguf(hf, tmp_path / "half.gguf", dtype="f16")))
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert field(reader, "general.file_type") == 1
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32


def rotate_half_rope(x, pos, theta=10000.0):
    """Hugging Face's rotary: dimension i turns with i + d/2."""
    d = x.shape[-1]
    ang = pos * theta ** (-np.arange(d // 2) * 2 / d)
    a, b = x[: d // 2], x[d // 2 :]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)])


def adjacent_rope(x, pos, theta=10000.0):
    """llama.cpp's "norm" rotary: dimension 2i turns with 2i + 1."""
    d = x.shape[-1]
    ang = pos * theta ** (-np.arange(d // 2) * 2 / d)
    a, b = x[0::2], x[1::2]
    out = np.empty_like(x)
    out[0::2], out[1::2] = a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)
    return out


def test_rope_rows_make_llama_cpp_scores_equal_hf_scores():
    """The reordered projections under llama.cpp's rotary give the twin's attention scores."""
    rng = np.random.default_rng(1)
    n_head, d, hidden = 2, 8, 5
    wq, wk = rng.standard_normal((n_head * d, hidden)), rng.standard_normal((n_head * d, hidden))
    x_m, x_n = rng.standard_normal(hidden), rng.standard_normal(hidden)
    pq, pk = gs.rope_rows(wq, n_head), gs.rope_rows(wk, n_head)
    for h in range(n_head):
        s = slice(h * d, (h + 1) * d)
        hf = rotate_half_rope(wq[s] @ x_m, 7) @ rotate_half_rope(wk[s] @ x_n, 3)
        cpp = adjacent_rope(pq[s] @ x_m, 7) @ adjacent_rope(pk[s] @ x_n, 3)
        assert cpp == pytest.approx(hf, rel=1e-12)


def test_vocabulary_pads_and_types():
    tok = json.loads((TEACHER / "tokenizer.json").read_text())
    names, kinds, merges = gs.vocabulary(tok, 2112)
    assert len(names) == len(kinds) == 2112
    assert names[2] == "<|im_end|>" and kinds[2] == gs.CONTROL
    assert names[2046] == "<think>" and kinds[2046] == gs.USER_DEFINED
    assert kinds[100] == gs.NORMAL and kinds[2111] == gs.UNUSED
    assert merges[0] == "h e"
    with pytest.raises(ValueError, match="beyond"):
        gs.vocabulary(tok, 2000)
    with pytest.raises(ValueError, match="byte-level BPE"):
        gs.vocabulary({"model": {"type": "Unigram"}}, 10)


def test_writer_refuses_what_llama_lacks(tmp_path):
    with pytest.raises(ValueError, match="q/k norm"):
        gs.gguf_name("model.layers.0.self_attn.q_norm.weight")
    assert gs.gguf_name("model.layers.3.mlp.up_proj.weight") == "blk.3.ffn_up.weight"
    hf = tiny_llama(tmp_path / "qwen")
    (hf / "config.json").write_text(json.dumps(CFG | {"model_type": "qwen3"}))
    with pytest.raises(ValueError, match="Llama twin"):
        gs.llama_gguf(hf, tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="dtype"):
        gs.llama_gguf(hf, tmp_path / "x.gguf", dtype="q4_0")


# --------------------------------------------------------------------------- the driver's parsing

LLAMA = {"n_ctx", "n_batch", "seed", "n_threads", "n_threads_batch", "logits_all", "draft_model", "verbose"}
COMPLETION = {"prompt", "max_tokens", "temperature", "top_k", "top_p", "stop", "seed", "repeat_penalty", "logit_bias"}
GENERATE = {"tokens", "temp", "top_k", "top_p", "repeat_penalty", "reset"}
ROUTES = (LLAMA, COMPLETION, GENERATE)


def test_arm_routes_by_signature():
    arm = {
        "n_ctx": 256,
        "seed": 3,
        "temperature": 0,
        "top_k": 1,
        "draft_model": {"prompt_lookup": {"num_pred_tokens": 5}},
    }
    llama, generate, draft = drv.split_arm(arm, *ROUTES)
    assert llama == {"n_ctx": 256, "seed": 3}  # seed: Llama()'s first
    assert generate == {"temp": 0, "top_k": 1}
    assert draft == {"prompt_lookup": {"num_pred_tokens": 5}}
    assert drv.split_arm({}, *ROUTES) == ({}, {}, None)


@pytest.mark.parametrize(
    "arm, message",
    [({"max_tokens": 5}, "driver's own"), ({"logit_bias": {}}, "driver's own"), ({"n_gpu": 1}, "neither"),
     ({"model_path": "x"}, "SPEC's")],
)  # fmt: skip
def test_arm_refuses_what_the_driver_owns_or_nobody_takes(arm, message):
    with pytest.raises(drv.SpecError, match=message):
        drv.split_arm(arm, *ROUTES)


def test_draft_spec():
    assert drv.parse_draft(None) is None
    assert drv.parse_draft({"prompt_lookup": {"num_pred_tokens": 5}}) == (
        "LlamaPromptLookupDecoding",
        {"num_pred_tokens": 5},
    )
    assert drv.parse_draft({"prompt_lookup": None}) == ("LlamaPromptLookupDecoding", {})
    assert drv.parse_draft({"MyDraft": {"k": 1}}) == ("MyDraft", {"k": 1})
    for bad in ("prompt_lookup", {"a": {}, "b": {}}, {"prompt_lookup": 5}):
        with pytest.raises(drv.SpecError):
            drv.parse_draft(bad)


def test_llama_kwargs_defaults_and_overrides():
    spec = {"prompts": [{"id": "a", "ids": [1] * 300}], "max_new_tokens": 16, "threads": 2, "seed": 7, "logits": True}
    ref = drv.llama_kwargs(spec, "reference", {})
    assert ref == {"n_ctx": 512, "n_threads": 2, "n_threads_batch": 2, "seed": 7, "verbose": False, "logits_all": True}
    spec_arm = drv.llama_kwargs(spec, "speculative", {"n_ctx": 1024})
    assert spec_arm["n_ctx"] == 1024 and "logits_all" not in spec_arm


def test_top2_orders_by_logit_then_id():
    row = np.array([0.5, 2.0, 2.0, -1.0], dtype=np.float32)
    assert drv.top2(row) == [[1, 2.0], [2, 2.0]]
    assert drv.top2(np.array([3.0, 1.0, 2.5], dtype=np.float32)) == [[0, 3.0], [2, 2.5]]


def test_driver_fails_in_one_line_and_writes_nothing(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "m.gguf", "arms": {"other": {}}, "prompts": [], "max_new_tokens": 1,
                                "samples": 1, "seed": 0, "threads": 1, "logits": False, "draft": None}))  # fmt: skip
    out = tmp_path / "out.jsonl"
    r = subprocess.run([sys.executable, str(DRIVER), str(spec), str(out)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "llama_cpp_python driver" in r.stderr
    assert not out.exists() and not (tmp_path / "out.jsonl.tmp").exists()


# --------------------------------------------------------------------------- the releases themselves


def release_python(version: str) -> Path:
    """The release's interpreter, or a skip naming the environment that is not (completely) built."""
    env = ENVS / f"llama-cpp-python-{version}"
    if not list(env.glob("lib/python*/site-packages/llama_cpp/lib/libllama.so")):
        pytest.skip(f"{env} not built (the zoo builds it: llama-cpp-python {version} from its sdist)")
    return env / "bin" / "python"


def case_prompts(n: int) -> list[dict]:
    """The tiny world's first evaluation prompt of `n` domains, chat-rendered to ids."""
    from transformers import AutoTokenizer

    from orthrus.chat import render_chat
    from orthrus.data.prompts import tiny_prompts

    tok = AutoTokenizer.from_pretrained(str(TEACHER))
    ev, _, _ = tiny_prompts(seed=0, eval_per_domain=1, distill_n=0)
    return [{"id": r.prompt_id, "ids": render_chat(tok, r.prompt)} for r in ev.head(n).itertuples()]


@pytest.fixture(scope="module")
def twin_gguf(tmp_path_factory):
    """The shipped teacher's Llama twin as f32 GGUF (the case's subject)."""
    subjects = pytest.importorskip("orthrus.zoo.subjects")
    base = tmp_path_factory.mktemp("twin")
    hf = subjects.llama_twin(base / "hf", "teacher")
    return hf, gs.llama_gguf(hf, base / "teacher.gguf")


def run_driver(py: Path, spec: dict, tmp_path: Path) -> tuple[dict, dict]:
    """The driver under a release: (environment, {(arm, prompt_id): record})."""
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "out.jsonl"
    r = subprocess.run([str(py), str(DRIVER), str(tmp_path / "spec.json"), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    return lines[0]["environment"], {(x["arm"], x["prompt_id"]): x for x in lines[1:]}


CASE_ARMS = {
    "reference": {"temperature": 0},
    "speculative": {"temperature": 0, "draft_model": {"prompt_lookup": {"num_pred_tokens": 5}}},
}


def case_spec(model: Path, prompts: list[dict]) -> dict:
    return {"model": str(model), "draft": None, "prompts": prompts, "arms": CASE_ARMS, "max_new_tokens": 32,
            "samples": 1, "seed": 0, "threads": 1, "logits": True}  # fmt: skip


def divergences(records: dict, prompts: list[dict]) -> list[tuple[str, int, float]]:
    """(prompt, first differing position, the reference's own top-1 minus top-2 there) per divergence."""
    found = []
    for p in prompts:
        ref, spec = records[("reference", p["id"])], records[("speculative", p["id"])]
        pos = next((i for i, (a, b) in enumerate(zip(ref["tokens"], spec["tokens"])) if a != b), None)
        if pos is None and len(ref["tokens"]) != len(spec["tokens"]):
            pos = min(len(ref["tokens"]), len(spec["tokens"]))
        if pos is not None:
            top = ref["top2"][min(pos, len(ref["top2"]) - 1)]
            found.append((p["id"], pos, top[0][1] - top[1][1]))
    return found


@pytest.mark.parametrize("version, caught", [("0.3.0", True), ("0.3.1", False)])
def test_release_case(version, caught, twin_gguf, tmp_path):
    """The bug at its release: 0.3.0's prompt lookup changes greedy tokens, by margins no rounding
    reaches; 0.3.1's changes none, with its drafts proposed and some accepted (fewer forwards than
    tokens), so the pass is not a draft that never fired."""
    py = release_python(version)
    prompts = case_prompts(4)
    env, records = run_driver(py, case_spec(twin_gguf[1], prompts), tmp_path)
    assert env["version"] == version and env["dtype"] == "f32"
    spec_records = [records[("speculative", p["id"])] for p in prompts]
    assert sum(r["drafted"] for r in spec_records) > 0
    found = divergences(records, prompts)
    if caught:
        assert len(found) >= 2 and max(m for _, _, m in found) > 1.0, found
    else:
        assert found == []
        assert sum(r["forwards"] for r in spec_records) < sum(len(r["tokens"]) for r in spec_records)


def test_gguf_logits_match_the_twin(twin_gguf, tmp_path):
    """llama.cpp's logits of the written file are the twin's own (transformers, f32) to rounding:
    the rotary reordering and the tensor names are right, not merely loadable. The rounding is
    llama.cpp's f16 KV cache (its default; 0.013 at most on this prompt, 3e-4 typical), where a
    wrong rotary or a misplaced tensor moves logits by whole units."""
    import torch
    from transformers import LlamaForCausalLM

    py = release_python("0.3.1")
    hf, model = twin_gguf
    ids = case_prompts(1)[0]["ids"]
    script = (
        "import sys, json, numpy as np; from llama_cpp import Llama\n"
        f"m = Llama(model_path={str(model)!r}, n_ctx=256, logits_all=True, verbose=False, n_threads=1)\n"
        f"m.eval({ids!r}); np.save(sys.argv[1], m.scores[: {len(ids)}])\n"
    )
    r = subprocess.run([str(py), "-c", script, str(tmp_path / "cpp.npy")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cpp = np.load(tmp_path / "cpp.npy")
    with torch.no_grad():
        ref = LlamaForCausalLM.from_pretrained(str(hf), dtype=torch.float32)(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(cpp - ref).max() < 0.05 and np.abs(cpp - ref).mean() < 2e-3
    assert (cpp.argmax(-1) == ref.argmax(-1)).all()
