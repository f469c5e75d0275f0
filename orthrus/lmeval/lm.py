"""The `orthrus` lm-eval model: lm-eval's `HFLM` with our decoding loop and chat rendering.

Importing this module registers the model with lm-eval's model registry (`--model orthrus`);
the package (`orthrus.lmeval`) imports it, so registration happens once, however the stage
is started. What the model does is documented in the package docstring.
"""
from __future__ import annotations

import logging

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text

log = logging.getLogger("orthrus.lmeval")

# ar-ref: lm-eval's own HFLM generation (transformers' generate, stop strings as stopping
# criteria), the baseline as the authors ran it; ar: the AR view through our loop.
DECODINGS = ("orthrus", "ar", "ar-ref")


def load_model(pretrained, decoding: str = "orthrus", dtype="fp32", attn_implementation: str = "eager",
               device: str | None = None):
    """An Orthrus checkpoint (any decoding) or, for the AR decodings, also a plain Qwen3 one."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from orthrus.modeling import OrthrusForCausalLM, check_finite, resolve_checkpoint
    from orthrus.precision import check_attention, parse_dtype

    if decoding not in DECODINGS:
        raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
    check_attention(attn_implementation)
    path = resolve_checkpoint(pretrained)
    cfg = Qwen3Config.from_pretrained(path)
    is_orthrus = getattr(cfg, "block_size", None) is not None and getattr(cfg, "mask_token_id", None) is not None
    if is_orthrus:
        model = OrthrusForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation)
    elif decoding in ("ar", "ar-ref"):
        model = Qwen3ForCausalLM.from_pretrained(path, dtype=parse_dtype(dtype), attn_implementation=attn_implementation,
                                                 use_safetensors=True).eval()
        check_finite(model, path)
    else:
        raise ValueError(f"{pretrained} is not an Orthrus checkpoint (no block_size/mask_token_id); "
                         "only decoding=ar or ar-ref can evaluate a plain model")
    if device and str(device).startswith("cuda") and not torch.cuda.is_available():
        log.warning("device %s requested but CUDA is not available: using the CPU", device)
        device = "cpu"
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device), path


@register_model("orthrus")
class OrthrusLM(HFLM):
    """lm-eval's `HFLM` whose generation runs `orthrus.generate` (see the `orthrus.lmeval` doc)."""

    def __init__(self, pretrained, decoding: str = "orthrus", dtype=None, attn_implementation: str | None = None,
                 attention: str | None = None, block_size: int | None = None, device: str | None = None,
                 tokenizer=None, system_message: str = "", enable_thinking: bool = False,
                 max_gen_toks: int = 256, seed: int = 1234, deterministic: bool = True, **kwargs):
        from orthrus.precision import configure, parse_dtype

        attn = attn_implementation or attention or "eager"
        if isinstance(pretrained, str):
            torch_dtype = configure(dtype or "fp32", deterministic=bool(deterministic))
            model, path = load_model(pretrained, decoding, torch_dtype, attn, device)
        else:  # a ready model (tests, notebooks): kept in its dtype unless `dtype` is given
            model, path = pretrained, getattr(pretrained, "name_or_path", None)
            configure(dtype or model.dtype, deterministic=bool(deterministic))
            if dtype is not None and model.dtype != parse_dtype(dtype):
                model = model.to(parse_dtype(dtype))
        if decoding not in DECODINGS:
            raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
        if decoding == "orthrus" and not hasattr(model, "diffusion_forward"):
            raise ValueError("decoding=orthrus needs an Orthrus model")
        kwargs.pop("dtype", None)
        kwargs.pop("backend", None)
        super().__init__(pretrained=model, tokenizer=tokenizer or path, backend="causal",
                         enable_thinking=bool(enable_thinking), **kwargs)
        self.decoding = decoding
        self.block_size = int(block_size) if block_size else None
        self.system_message = "" if system_message is None else str(system_message)
        self._default_max_gen_toks = int(max_gen_toks)
        self.seed = int(seed)
        self.pretrained_path = str(pretrained) if isinstance(pretrained, str) else path
        self._chat_rendered = False
        self.generation_log: list[dict] = []  # one entry per generate_until request

    @property
    def max_gen_toks(self) -> int:
        return self._default_max_gen_toks

    # ---- chat rendering: orthrus.chat.render_chat semantics ----------------------------

    def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:
        msgs = [dict(m) for m in chat_history]
        prefix = ""
        if not add_generation_prompt and msgs and msgs[-1]["role"] == "assistant":
            prefix = msgs.pop()["content"]  # the task's gen_prefix: appended verbatim below
        if not msgs or msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": self.system_message})
        text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                                  **self.chat_template_args)
        self._chat_rendered = True
        return text + prefix

    def reset_chat_rendering(self) -> None:
        """Tokenize contexts as plain text again until `apply_chat_template` renders one.

        Call it before each lm-eval run on this model: a run without the chat template must
        not inherit the previous run's "contexts are rendered" state."""
        self._chat_rendered = False

    def _encode_context(self, context: str) -> list[int]:
        if self._chat_rendered:
            return self.tokenizer(context, add_special_tokens=False)["input_ids"]
        return self.tok_encode(context)

    # ---- generation through our decoding loop ---------------------------------------------

    def _eos_ids(self) -> list[int]:
        gen = getattr(self.model.generation_config, "eos_token_id", None)
        ids = [gen] if isinstance(gen, int) else list(gen or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return ids

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from tqdm import tqdm

        if self.decoding == "ar-ref":  # HFLM's own loop: transformers' generate, as the authors ran it
            return super().generate_until(requests, disable_tqdm=disable_tqdm)

        from orthrus.decoding import generate

        eos_ids = self._eos_ids()
        eos_text = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        out = []
        for req in tqdm(requests, disable=disable_tqdm or self.rank != 0, desc=f"generate_until ({self.decoding})"):
            context, gen_kwargs = req.args
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
            max_gen_toks = int(kwargs.pop("max_gen_toks"))
            sample = bool(kwargs.get("do_sample")) and float(kwargs.get("temperature") or 0) > 0
            ids = self._encode_context(context)
            max_ctx = self.max_length - max_gen_toks
            if max_ctx <= 0:
                raise ValueError(f"max_gen_toks {max_gen_toks} leaves no room for the prompt (max_length {self.max_length})")
            ids = ids[-max_ctx:]
            extra = {}
            if sample:
                extra = {"temperature": float(kwargs["temperature"]), "top_k": kwargs.get("top_k"),
                         "top_p": kwargs.get("top_p"),
                         "generator": torch.Generator(device=self.model.device).manual_seed(self.seed + len(self.generation_log))}
            res = generate(self.model, torch.tensor(ids, dtype=torch.long), mode=self.decoding,
                           max_new_tokens=max_gen_toks, eos_token_id=eos_ids, block_size=self.block_size, **extra)
            tokens = res.tokens.tolist()
            text = self.tok_decode(tokens)
            text = postprocess_generated_text(text, until, self.think_end_token if isinstance(self.think_end_token, str) else None)
            out.append(text)
            st = res.stats
            self.generation_log.append({
                "task": getattr(req, "task_name", None), "doc_id": getattr(req, "doc_id", None),
                "prompt_len": len(ids), "tokens": tokens, "n_tokens": st["n_tokens"],
                "finish_reason": st["finish_reason"], "n_prefill": st["n_prefill"],
                "n_diffusion": st["n_diffusion"], "n_verify": st["n_verify"], "accepted": st["accepted"],
                "seconds": st["seconds"], "tpf_verify": st["tpf_verify"], "tpf_authors": st["tpf_authors"],
            })
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
        return out

    def get_model_info(self) -> dict:
        # HFLM's asks the hub for the model's commit: a network call, and meaningless for a path
        m = self.model
        return {"model_num_parameters": sum(p.numel() for p in m.parameters()), "model_dtype": str(m.dtype),
                "model_path": self.pretrained_path, "decoding": self.decoding,
                "block_size": self.block_size or getattr(m.config, "block_size", None)}

