"""The zoo's tiny subject with a multi-token-prediction (MTP) layer, for transformers' `use_mtp=True`
drafter (huggingface/transformers#47932: 5.15.0 biased, 5.15.1 fixed).

transformers 5.15 drafts with MTP only for models whose class names the MTP weights among its
`_keys_to_ignore_on_load_unexpected` and whose config carries `num_mtp_layers` (5.15: GLM4-MoE,
DeepSeek-V3, Inkling). `MtpModel.from_pretrained` keeps only the patterns whose layer number is at
least `num_hidden_layers` and renames `layers.{num_hidden_layers + k}.` to MTP layer k, so the MTP
weights must sit at exactly the layer number the class hard-codes: GLM4-MoE's `model.layers.46`
(GLM-4.5-Air; 92 for GLM-4.5), DeepSeek-V3's `model.layers.61`. A tiny model therefore keeps the
real layer count and shrinks everything else: GLM4-MoE, 46 decoder layers of width 32 (the cheapest
of the counts on offer), MTP layer 46 after them.

`first_k_dense_replace` is 0: every layer is MoE. 5.15.1 forces the MTP config's
`first_k_dense_replace` to 0 (MTP layers are MoE), 5.15.0 keeps the model's, so with any other value
the two releases would build different MTP blocks and one of them would refuse the checkpoint; with
0 both read the same weights, and the release's sampling code is the only difference between them.
(The published GLM-4.5 and DeepSeek-V3 checkpoints start with dense layers, first_k_dense_replace
>= 1: 5.15.0 builds their MTP block dense and refuses their MoE MTP weights as missing.)

The weights are drawn from one seeded generator in a fixed order (no transformers initialiser
involved), written in the hub checkpoint's own naming (experts one by one, as GLM-4.5 ships them)
with safetensors only: the same bytes from any transformers release, readable by all of them.
Vocabulary: the shipped world's 2112 ids; no tokenizer (the zoo feeds token ids).

The values are chosen so that the bug shows at the release's defaults (temperature 1, top_k 50),
and within a hundred samples of one prompt at temperature 0.7 with that top_k:
- the head's rows have log-normal norms, so a next-token distribution looks like a language model's
  (a few likely tokens and a long tail: median top-1 about 0.3, about a third of the mass beyond the
  50 likeliest); the mass a top-k cuts is what the raw q of 5.15.0 keeps and the draft's sample does
  not;
- every block's output projections are small (`BLOCK_GAIN`), so the residual stream stays near the
  last token's embedding and the target's next step depends mostly on the last token;
- the MTP layer passes the new token's embedding through (eh_proj the identity on it) and its final
  norm scales the shared head's logits by `MTP_HEAD_GAIN`: its draft ranks tokens as the target's next
  step does, less sharply, as a trained MTP head does. A draft unrelated to the target is mostly
  rejected whatever its q, and a draft equal to it is always accepted: the bias of a wrong q is
  largest between the two, where this one sits (total variation about 0.3 at the second token).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

MODEL_TYPE = "glm4_moe"
NUM_HIDDEN_LAYERS = 46  # Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected names model.layers.46 (and 92)
NUM_MTP_LAYERS = 1

CONFIG = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": MODEL_TYPE,
    "vocab_size": 2112,
    "hidden_size": 32,
    "intermediate_size": 64,
    "moe_intermediate_size": 16,
    "num_hidden_layers": NUM_HIDDEN_LAYERS,
    "num_nextn_predict_layers": NUM_MTP_LAYERS,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_qk_norm": False,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 0,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "use_cache": True,
    "bos_token_id": None,
    "eos_token_id": None,  # no stop: every sample runs to max_new_tokens, so every position is tested
    "pad_token_id": 0,
    "dtype": "float32",
}

HEAD_SCALE = 1.0  # a logit's spread before the row norms: see the module's docstring
HEAD_ROW_SIGMA = 0.5  # log-normal sigma of the head's row norms
BLOCK_GAIN = 0.05  # each block's output projections: the residual stream stays near the last token's embedding
MTP_HEAD_GAIN = 0.7  # the MTP layer's final norm: its logits are the target's next step's, times about 0.7


def layer_shapes(cfg: dict = CONFIG) -> dict[str, tuple[int, ...]]:
    """One GLM4-MoE decoder layer's tensors as the hub checkpoint names them (relative to
    `model.layers.N.`), every layer MoE: the router, its score bias, each expert, the shared one."""
    h, hd = cfg["hidden_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    moe, shared = cfg["moe_intermediate_size"], cfg["moe_intermediate_size"] * cfg["n_shared_experts"]
    out = {
        "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (q, h),
        "self_attn.k_proj.weight": (kv, h),
        "self_attn.v_proj.weight": (kv, h),
        "self_attn.o_proj.weight": (h, q),
        "mlp.gate.weight": (cfg["n_routed_experts"], h),
        "mlp.gate.e_score_correction_bias": (cfg["n_routed_experts"],),
        "mlp.shared_experts.gate_proj.weight": (shared, h),
        "mlp.shared_experts.up_proj.weight": (shared, h),
        "mlp.shared_experts.down_proj.weight": (h, shared),
    }
    for e in range(cfg["n_routed_experts"]):
        out |= {
            f"mlp.experts.{e}.gate_proj.weight": (moe, h),
            f"mlp.experts.{e}.up_proj.weight": (moe, h),
            f"mlp.experts.{e}.down_proj.weight": (h, moe),
        }
    return out


def mtp_shapes(cfg: dict = CONFIG) -> dict[str, tuple[int, ...]]:
    """The MTP layer's own tensors beside its decoder block (GLM-4.5's names: `shared_head.norm` is
    the norm before the shared head; the head and the embedding are the main model's, not repeated)."""
    h = cfg["hidden_size"]
    return {"enorm.weight": (h,), "hnorm.weight": (h,), "eh_proj.weight": (h, 2 * h), "shared_head.norm.weight": (h,)}


def checkpoint_shapes(cfg: dict = CONFIG) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint, in the order the generator draws them."""
    h, n = cfg["hidden_size"], cfg["num_hidden_layers"]
    out = {"model.embed_tokens.weight": (cfg["vocab_size"], h)}
    for i in range(n + cfg["num_nextn_predict_layers"]):
        layer = layer_shapes(cfg) | (mtp_shapes(cfg) if i >= n else {})
        out |= {f"model.layers.{i}.{k}": s for k, s in layer.items()}
    return out | {"model.norm.weight": (h,), "lm_head.weight": (cfg["vocab_size"], h)}


def mtp_names(cfg: dict = CONFIG) -> list[str]:
    """The checkpoint names 5.15's MtpModel loads (its layer `num_hidden_layers`)."""
    prefix = f"model.layers.{cfg['num_hidden_layers']}."
    return [k for k in checkpoint_shapes(cfg) if k.startswith(prefix)]


def _draw(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """One tensor, as the module's docstring says why: norms one (the MTP head's `MTP_HEAD_GAIN`), the
    router's score bias zero, the embedding unit normal, a projection normal with variance 1/fan_in,
    a block's output projections (attention's o_proj, every down_proj) times `BLOCK_GAIN`, the MTP
    layer's eh_proj the identity on the new token's embedding plus a `BLOCK_GAIN` of noise."""
    if name.endswith("shared_head.norm.weight"):
        return torch.full(shape, MTP_HEAD_GAIN)
    if name.endswith("norm.weight"):
        return torch.ones(shape)
    if name.endswith("e_score_correction_bias"):
        return torch.zeros(shape)
    w = torch.randn(shape, generator=gen)
    if name == "model.embed_tokens.weight":
        return w
    if name == "lm_head.weight":
        rows = torch.exp(HEAD_ROW_SIGMA * torch.randn(shape[0], 1, generator=gen))
        return w * rows * HEAD_SCALE / math.sqrt(shape[1])
    w = w / math.sqrt(shape[1])
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return w * BLOCK_GAIN
    if name.endswith("eh_proj.weight"):  # [enorm(embedding), hnorm(hidden)] -> the embedding
        return torch.cat([torch.eye(shape[0]), torch.zeros(shape[0], shape[1] - shape[0])], 1) + w * BLOCK_GAIN
    return w


def state_dict(seed: int = 0, cfg: dict = CONFIG) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors, float32, drawn in `checkpoint_shapes` order from one generator."""
    gen = torch.Generator().manual_seed(seed)
    return {k: _draw(k, s, gen).contiguous() for k, s in checkpoint_shapes(cfg).items()}


def mtp_subject(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the subject (config.json, generation_config.json, model.safetensors) to `out_dir`:
    the same bytes for the same seed. The generation config is plain (no sampling settings of its
    own) so that the zoo's arms state every setting they use."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = CONFIG | {"transformers_version": "5.15.0"}
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    gen_cfg = {"pad_token_id": cfg["pad_token_id"], "transformers_version": "5.15.0"}
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2, sort_keys=True) + "\n")
    # metadata of one key: safetensors writes a map's keys in hash order, not the same bytes twice
    save_file(state_dict(seed), str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
