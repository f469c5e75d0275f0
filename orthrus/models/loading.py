"""Helpers every stage that touches a model shares, written once: is it a hub id, which ids end a
trajectory, and loading a model (and an assisted decoder's draft) at a run's options.

Never runs checkpoint code, never unpickles. Light to import: torch and transformers are
imported where a model is loaded.
"""

from __future__ import annotations

from pathlib import Path

from orthrus.contracts import PLAIN_LM_DECODERS
from orthrus.decoders import DECODER
from orthrus.errors import InputError
from orthrus.options import EOS_POLICIES, DecodeOptions, OptionsError


def eos_ids(model, policy: str = DecodeOptions.eos, tokenizer=None) -> list[int]:
    """The ids that end a trajectory, in order: every id of `generation_config.eos_token_id` (what
    transformers' generate stops on; Qwen3 lists two) or only `config.eos_token_id` (what the
    released Orthrus loop stops on); then, when `tokenizer` is given, its EOS id if neither lists
    it (the corpus and a plain model whose generation config sets none)."""
    if policy not in EOS_POLICIES:
        raise OptionsError(f"eos policy must be one of {EOS_POLICIES}, got {policy!r}")
    src = model.generation_config if policy == "generation_config" else model.config
    eos = getattr(src, "eos_token_id", None)
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer is not None and tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


def load_model(path, options: DecodeOptions, device: str = "cpu", revision: str | None = None):
    """(model, tokenizer) for `options.decoder` at its precision, attention and determinism:
    for the decoders that need no diffusion view (transformers' and an engine's file, which the
    teacher scores) any causal LM transformers loads without remote code, the Orthrus checkpoint
    for our loop (`ar` and the `oracle` control also take a plain model of an Orthrus family, e.g.
    the teacher through our loop)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orthrus.models.files import config_model_type, resolve_checkpoint
    from orthrus.models.modeling import FAMILIES, OrthrusForCausalLM, family, load_complete
    from orthrus.models.precision import check_attention, configure

    path = resolve_checkpoint(path, revision=revision)
    kind = config_model_type(path)
    dtype = configure(options.precision, deterministic=options.deterministic)
    check_attention(options.attention)
    kw = {"dtype": dtype, "attn_implementation": options.attention}
    if options.decoder in PLAIN_LM_DECODERS:
        model = load_complete(AutoModelForCausalLM, path, use_safetensors=True, **kw)
    elif kind not in (None, *FAMILIES):
        raise InputError(
            f"{path} is a {kind!r} model; decoder {options.decoder} runs this package's loop, "
            f"which needs a model of the families {sorted(FAMILIES)} or an Orthrus checkpoint (any causal "
            f"LM works with {', '.join(PLAIN_LM_DECODERS)})"
        )
    elif is_orthrus_checkpoint(path):
        model = OrthrusForCausalLM.from_pretrained(path, **kw)
    elif not DECODER[options.decoder].diffusion:  # the loop on the backbone alone (ar, oracle)
        model = load_complete(family(kind, path)[0], path, use_safetensors=True, **kw)
    else:
        raise InputError(
            f"{path} is not an Orthrus checkpoint (its config.json has no block_size/mask_token_id); "
            f"decoder {options.decoder} needs one"
        )
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model.to(device).eval(), tokenizer


def is_orthrus_checkpoint(path) -> bool:
    import json

    cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    return cfg.get("block_size") is not None and cfg.get("mask_token_id") is not None


def load_draft(path: str, model, tokenizer, model_path: str):
    """The draft model of `assisted`, in the model's dtype, attention and device; refused,
    naming both, unless it has the model's tokenizer (same vocabulary and special tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orthrus.models.files import resolve_checkpoint
    from orthrus.models.modeling import load_complete

    path_ = resolve_checkpoint(path)
    check_same_tokenizer(tokenizer, AutoTokenizer.from_pretrained(path_), model_path, path)
    draft = load_complete(
        AutoModelForCausalLM,
        path_,
        dtype=model.dtype,
        use_safetensors=True,
        attn_implementation=model.config._attn_implementation,
    )
    return draft.to(model.device).eval()


def check_same_tokenizer(tok, draft_tok, model_path: str, draft_path: str) -> None:
    def spec(t):
        return t.get_vocab(), t.eos_token_id, t.pad_token_id

    if spec(tok) != spec(draft_tok):
        raise InputError(
            f"the draft model {draft_path} does not share the tokenizer of the model {model_path} "
            f"({len(draft_tok)} vs {len(tok)} tokens, eos {draft_tok.eos_token_id} vs {tok.eos_token_id}); "
            "assisted decoding needs one token space"
        )
