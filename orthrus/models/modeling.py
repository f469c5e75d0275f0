"""Orthrus: a frozen causal LM plus a trainable "diffusion" view of every attention layer.

The model *is* its backbone's causal LM (the AR view, unchanged): a `Qwen3ForCausalLM`, as the
released checkpoint `chiennv/Orthrus-Qwen3-1.7B`, or a `LlamaForCausalLM` (SmolLM2 and the rest
of the Llama family), with a twin of every attention projection and q/k norm the family has,
named as in the released checkpoint: `model.layers.{i}.self_attn.{q,k,v,o}_proj_diff` and, on
Qwen3, `{q,k}_norm_diff`. Embeddings, MLPs, layer norms and the LM head are shared. The
diffusion view reads the AR KV cache and never writes it.

`OrthrusForCausalLM.from_base` and `.from_pretrained` are the one entry point: they read the
backbone's `model_type` and build that family's class (`FAMILIES`), so nothing outside this
module needs to know which family a model is.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb, eager_attention_forward

from orthrus.contracts import ORTHRUS_FAMILIES
from orthrus.errors import ModelError
from orthrus.models.files import check_finite, config_model_type, non_float_tensors, resolve_checkpoint

DIFF_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")
MASK_TOKEN = "<|mask|>"
RELEASED_ARCHITECTURE = "OrthrusLM"


class OrthrusMixin:
    """Diffusion attention projections on top of a family's causal LM. `forward` is the AR view."""

    def __init__(self, config):
        super().__init__(config)
        for layer in self.model.layers:
            attn = layer.self_attn
            for name in self.diff_modules():
                src = getattr(attn, name)
                if isinstance(src, nn.Linear):
                    new = nn.Linear(src.in_features, src.out_features, bias=src.bias is not None)
                else:  # the family's RMSNorm (Qwen3's q/k norms)
                    new = type(src)(src.weight.shape[0], eps=src.variance_epsilon)
                setattr(attn, f"{name}_diff", new)
        self.post_init()
        self.freeze_backbone()

    def diff_modules(self) -> tuple[str, ...]:
        """The attention modules that have a diffusion twin: those of DIFF_MODULES the family has."""
        attn = self.model.layers[0].self_attn
        return tuple(n for n in DIFF_MODULES if isinstance(getattr(attn, n, None), nn.Module))

    # ---- parameters -------------------------------------------------------------------------

    @staticmethod
    def is_diffusion_parameter(name: str) -> bool:
        return name.rsplit(".", 2)[-2].endswith("_diff")

    def diffusion_parameters(self):
        return [p for n, p in self.named_parameters() if self.is_diffusion_parameter(n)]

    def freeze_backbone(self) -> None:
        for n, p in self.named_parameters():
            p.requires_grad_(self.is_diffusion_parameter(n))

    def copy_ar_to_diffusion(self) -> None:
        """Initialise every diffusion module as a copy of its AR twin (Orthrus' initialisation)."""
        with torch.no_grad():
            for layer in self.model.layers:
                for name in self.diff_modules():
                    getattr(layer.self_attn, f"{name}_diff").load_state_dict(
                        getattr(layer.self_attn, name).state_dict()
                    )

    @property
    def block_size(self) -> int:
        return int(self.config.block_size)

    @property
    def mask_token_id(self) -> int:
        return int(self.config.mask_token_id)

    # ---- construction -----------------------------------------------------------------------

    @classmethod
    def from_base(
        cls,
        base,
        block_size: int,
        mask_token_id: int | None = None,
        tokenizer=None,
        mask_token: str = MASK_TOKEN,
        **load_kwargs,
    ):
        """Build Orthrus from a causal LM of a family in FAMILIES (instance, local directory or hub id).

        `mask_token_id=None` adds a dedicated `mask_token` (default `<|mask|>`; the follow-up
        paper's authors named theirs `<|orthrus_mask|>`) at id `len(tokenizer)` (as the
        released checkpoint did), growing the embedding only if that row does not exist yet; its
        row starts as the mean embedding. `tokenizer` is updated in place; when `base` is a path
        and no tokenizer is given, it is loaded from there (then reach it as `model.tokenizer`).
        """
        if not _is_int(block_size) or block_size < 2:
            raise ModelError(
                f"block_size must be an integer >= 2 (one anchor plus at least one proposal), got {block_size!r}"
            )
        if mask_token_id is not None and not _is_int(mask_token_id):
            raise ModelError(f"mask_token_id must be None (add a mask token) or an integer id, got {mask_token_id!r}")
        if not isinstance(base, nn.Module):
            path = resolve_checkpoint(base)
            if tokenizer is None and mask_token_id is None:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(path)
            base_cls = family(config_model_type(path), path)[0]
            base = load_complete(base_cls, path, use_safetensors=True, **load_kwargs)
        family_cls = orthrus_class(getattr(base.config, "model_type", None), type(base).__name__)
        config = type(base.config).from_dict(base.config.to_dict())
        config.block_size = int(block_size)
        config._attn_implementation = base.config._attn_implementation
        model = family_cls(config).to(dtype=base.dtype, device=base.device)
        missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
        missing = [k for k in missing if not cls.is_diffusion_parameter(k) and k != "lm_head.weight"]
        if missing or unexpected:
            raise ValueError(
                f"base model does not fit {type(model).__name__}: missing {missing}, unexpected {unexpected}"
            )
        model.tie_weights()
        model.copy_ar_to_diffusion()
        if mask_token_id is None:
            if tokenizer is None:
                raise ValueError("mask_token_id=None adds a new mask token, which needs the tokenizer")
            mask_token_id = model._add_mask_token(tokenizer, mask_token)
        elif not 0 <= mask_token_id < model.config.vocab_size:
            raise ModelError(
                f"mask_token_id {mask_token_id} outside the vocabulary of {model.config.vocab_size} ids "
                "(0..vocab_size-1); use an id of the vocabulary, or None for a new mask token"
            )
        model.config.mask_token_id = int(mask_token_id)
        model.generation_config = base.generation_config
        model.tokenizer = tokenizer
        model.freeze_backbone()
        return model

    def _add_mask_token(self, tokenizer, name: str = MASK_TOKEN) -> int:
        if name in tokenizer.get_vocab():
            return tokenizer.convert_tokens_to_ids(name)
        n_real = len(tokenizer)
        tokenizer.add_special_tokens({"additional_special_tokens": [name]}, replace_extra_special_tokens=False)
        mask_id = tokenizer.convert_tokens_to_ids(name)
        if mask_id >= self.config.vocab_size:
            self.resize_token_embeddings(mask_id + 1, pad_to_multiple_of=64, mean_resizing=False)
        with torch.no_grad():
            emb = self.get_input_embeddings().weight
            emb[mask_id] = emb[:n_real].float().mean(0).to(emb.dtype)
        self.freeze_backbone()
        return mask_id

    @classmethod
    def from_pretrained(
        cls, path_or_id, *args, dtype=None, attn_implementation: str = "eager", allow_pickle: bool = False, **kwargs
    ):
        """Load our saves or the released checkpoint format, without running any shipped code.

        Missing, unexpected or misshaped weights raise, naming the keys. Pickled `.bin`
        weights are refused unless `allow_pickle=True`.
        """
        from orthrus.models.precision import parse_dtype

        if not isinstance(allow_pickle, bool):  # "no" would be truthy: pickles allowed by accident
            raise ModelError(f"allow_pickle must be True or False, got {allow_pickle!r}")
        path = resolve_checkpoint(path_or_id, allow_pickle=allow_pickle)
        kind = config_model_type(path)
        target = orthrus_class(kind, path)
        if cls is not target:  # the generic entry point: this checkpoint's family
            return target.from_pretrained(
                path, *args, dtype=dtype, attn_implementation=attn_implementation, allow_pickle=allow_pickle, **kwargs
            )
        config = family(kind, path)[1].from_pretrained(path)
        for key in ("block_size", "mask_token_id"):
            if getattr(config, key, None) is None:
                raise ModelError(
                    f"{path}/config.json has no {key!r}: not an Orthrus checkpoint (use from_base for a plain causal LM)"
                )
        check_orthrus_config(path, config)
        config.auto_map = None  # released configs point at remote code; we never use it
        check_weights(path, cls, config)
        bad = non_float_tensors(path, with_file=True)
        if bad:  # transformers would cast them to the load dtype without a word: a diffusion view of noise
            raise ModelError(
                f"{path}: weights stored as integers, not floating point: {', '.join(bad[:8])}"
                + (f" (+{len(bad) - 8})" if len(bad) > 8 else "")
            )
        if dtype is not None:
            kwargs["dtype"] = parse_dtype(dtype)
        model = super().from_pretrained(
            path,
            *args,
            config=config,
            attn_implementation=attn_implementation,
            use_safetensors=None if allow_pickle else True,
            **kwargs,
        )
        check_finite(model, path)
        model.freeze_backbone()
        model.eval()
        return model

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save in the released format: `architectures: ["OrthrusLM"]`, safetensors."""
        super().save_pretrained(save_directory, *args, **kwargs)
        cfg_path = Path(save_directory) / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["architectures"] = [RELEASED_ARCHITECTURE]
        cfg.pop("auto_map", None)
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        if getattr(self, "tokenizer", None) is not None:
            self.tokenizer.save_pretrained(save_directory)

    # ---- the diffusion view -----------------------------------------------------------------

    def diffusion_forward(
        self, input_ids, position_ids, past_key_values, attention_mask=None, output_hidden_states=False
    ):
        """Logits of the diffusion view for `input_ids` at `position_ids`.

        `past_key_values`: the AR cache (a `Cache`), read but never written. `attention_mask`:
        None lets every query see the whole cache and the whole block (decoding); training
        passes an additive float mask of shape (1, 1, q_len, past_len + q_len) for many blocks.
        """
        hidden = self.model.embed_tokens(input_ids)
        position_embeddings = self.model.rotary_emb(hidden, position_ids)
        all_hidden = [hidden] if output_hidden_states else None
        for i, layer in enumerate(self.model.layers):
            cached = past_key_values.layers[i]
            residual = hidden
            hidden = layer.input_layernorm(hidden)
            hidden = self._diffusion_attention(
                layer.self_attn, hidden, position_embeddings, cached.keys, cached.values, attention_mask
            )
            hidden = residual + hidden
            residual = hidden
            hidden = residual + layer.mlp(layer.post_attention_layernorm(hidden))
            if output_hidden_states:
                all_hidden.append(hidden)
        logits = self.lm_head(self.model.norm(hidden))
        return (logits, all_hidden) if output_hidden_states else logits

    def _diffusion_attention(self, attn, hidden, position_embeddings, past_k, past_v, attention_mask):
        shape = (*hidden.shape[:-1], -1, attn.head_dim)
        q, k = attn.q_proj_diff(hidden).view(shape), attn.k_proj_diff(hidden).view(shape)
        if hasattr(attn, "q_norm_diff"):  # Qwen3 normalises q and k per head; Llama does not
            q, k = attn.q_norm_diff(q), attn.k_norm_diff(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = attn.v_proj_diff(hidden).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        if past_k is not None and past_k.numel():
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        out, _ = interface(attn, q, k, v, attention_mask, dropout=0.0, scaling=attn.scaling, is_causal=False)
        return attn.o_proj_diff(out.reshape(*hidden.shape[:-1], -1).contiguous())


class OrthrusForCausalLM(OrthrusMixin, Qwen3ForCausalLM):
    """Orthrus on Qwen3 (the released checkpoints' family), and the entry point for every family:
    `from_base` and `from_pretrained` return the class of the backbone's family."""


class OrthrusLlamaForCausalLM(OrthrusMixin, LlamaForCausalLM):
    """Orthrus on the Llama family (SmolLM2, Llama 2/3, ...): no q/k norms, so only the four
    projections have diffusion twins."""


# model_type -> (the backbone's causal LM, its config class, the Orthrus class); `orthrus` is the
# authors' released format (a Qwen3 config under another model_type)
FAMILIES = {
    "qwen3": (Qwen3ForCausalLM, Qwen3Config, OrthrusForCausalLM),
    "orthrus": (Qwen3ForCausalLM, Qwen3Config, OrthrusForCausalLM),
    "llama": (LlamaForCausalLM, LlamaConfig, OrthrusLlamaForCausalLM),
}
assert tuple(FAMILIES) == ORTHRUS_FAMILIES


def family(model_type, where) -> tuple:
    """FAMILIES' row for `model_type` (None, as an old config without the key, reads as Qwen3);
    an error naming `where` and the families this package runs its loop on otherwise."""
    if model_type is None:
        model_type = "qwen3"
    if model_type not in FAMILIES:
        raise ModelError(
            f"{where} is a {model_type!r} model; Orthrus is built on the families {sorted(FAMILIES)} "
            "(any causal LM works with the decoders that need no diffusion view)"
        )
    return FAMILIES[model_type]


def orthrus_class(model_type, where):
    return family(model_type, where)[2]


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_orthrus_config(path, config) -> None:
    """The Orthrus keys of a checkpoint's config.json: `block_size` an integer >= 2 (one anchor plus
    at least one proposal), `mask_token_id` an id of the vocabulary (0..vocab_size-1)."""
    where = f"{path}/config.json"
    k, m, vocab = config.block_size, config.mask_token_id, getattr(config, "vocab_size", None)
    if not _is_int(k) or k < 2:
        raise ModelError(
            f"{where}: key 'block_size' is {k!r}, not an integer >= 2 (one anchor plus at least one "
            "proposal): not a usable Orthrus checkpoint"
        )
    if not _is_int(m) or not _is_int(vocab) or not 0 <= m < vocab:
        raise ModelError(
            f"{where}: key 'mask_token_id' is {m!r}, not an id of the vocabulary (0..{vocab - 1 if _is_int(vocab) else '?'}, "
            "vocab_size): the diffusion view would read a token the model has no embedding for"
        )


def check_weights(path, cls, config) -> None:
    """Compare the checkpoint's tensor names and shapes with the architecture; name every problem.

    Reads only safetensors headers (no tensor data), so it is cheap even at paper scale.
    """
    from safetensors import safe_open

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        return  # pickled weights (opt-in): transformers' own loading checks them
    found = {}
    for f in files:
        with safe_open(f, framework="pt") as handle:
            found.update({k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()})
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in cls(config).state_dict().items()}
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
        found.pop("lm_head.weight", None)
    problems = {
        "missing": sorted(set(expected) - set(found)),
        "unexpected": sorted(set(found) - set(expected)),
        "misshaped": [
            f"{k}: checkpoint {found[k]} vs model {expected[k]}"
            for k in sorted(set(found) & set(expected))
            if found[k] != expected[k]
        ],
    }
    if any(problems.values()):
        detail = "; ".join(f"{kind} keys: {keys}" for kind, keys in problems.items() if keys)
        raise ModelError(f"checkpoint {path} does not match the Orthrus architecture: {detail}")


def load_complete(cls, path, **kwargs):
    """`cls.from_pretrained(path, **kwargs)` refusing, with the tensors named, a checkpoint that lacks
    weights of the architecture (transformers would initialise them at random: a teacher of noise),
    holds others or holds them in other shapes or as integers; then `check_finite`."""
    bad = non_float_tensors(path) if Path(path).is_dir() else []
    if bad:
        raise ModelError(f"{path}: weights stored as integers, not floating point: {', '.join(bad[:8])}")
    model, info = cls.from_pretrained(path, output_loading_info=True, **kwargs)
    problems = {
        kind: sorted(info.get(key) or [])
        for kind, key in (
            ("missing", "missing_keys"),
            ("unexpected", "unexpected_keys"),
            ("misshaped", "mismatched_keys"),
        )
    }
    # an Orthrus checkpoint read as its plain AR view: the diffusion weights are extra, not wrong
    problems["unexpected"] = [
        k for k in problems["unexpected"] if not OrthrusForCausalLM.is_diffusion_parameter(str(k))
    ]
    if any(problems.values()):
        detail = "; ".join(
            f"{kind}: {', '.join(map(str, keys[:8]))}" + (f" (+{len(keys) - 8})" if len(keys) > 8 else "")
            for kind, keys in problems.items()
            if keys
        )
        raise ModelError(f"{path}: the weights do not match {type(model).__name__} ({detail})")
    check_finite(model, path)
    return model
