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

from orthrus.chat import chat_messages
from orthrus.contracts import PRECISIONS
from orthrus.decode.trajectory import Trajectory
from orthrus.decoders import DECODER
from orthrus.models.hub import snapshot_commit
from orthrus.options import DecodeOptions, OptionsError

log = logging.getLogger("orthrus.lmeval")

# the decoders lm-eval runs, from the decoder table: the reference (ar-ref) by lm-eval's own HFLM
# generation (transformers' generate, stop strings as stopping criteria), the baseline as the authors
# ran it; a model's own AR view (ar) and the speculative loop (orthrus) through our loop. The controls
# and the engines' files are the audit's, not a benchmark's.
DECODINGS = tuple(
    d.name
    for d in DECODER.values()
    if d.role in ("reference", "view") or (d.role == "speculative" and d.runner == "loop")
)


def load_model(pretrained, options: DecodeOptions, device: str | None = None):
    """(model, resolved path) for `options` (`orthrus.models.loading.load_model`): an Orthrus checkpoint,
    or for the AR decodings also a plain Qwen3 one; the CPU when CUDA is asked for but absent."""
    from orthrus.models.loading import load_model as load

    if options.decoder not in DECODINGS:
        raise OptionsError(f"decoding must be one of {DECODINGS}, got {options.decoder!r}")
    if device and str(device).startswith("cuda") and not torch.cuda.is_available():
        log.warning("device %s requested but CUDA is not available: using the CPU", device)
        device = "cpu"
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model, _ = load(pretrained, options, device)
    return model, model.name_or_path


def lm_options(
    options=None,
    decoding=None,
    dtype=None,
    attention=None,
    block_size=None,
    eos=None,
    last_block=None,
    prefill_logits=None,
    deterministic=None,
    message=None,
) -> DecodeOptions:
    """The run's `DecodeOptions`: `options` (an object, its JSON or None) with the lm-eval model
    arguments that are given on top (they arrive as strings from `--model_args`)."""
    base = DecodeOptions.from_json(options) if isinstance(options, str) else (options or DecodeOptions())
    given = {
        "decoder": decoding,
        "precision": dtype,
        "attention": attention,
        "block_size": int(block_size) if block_size not in (None, "") else None,
        "eos": eos,
        "last_block": last_block,
        "prefill_logits": prefill_logits,
        "message": message,
        "deterministic": None if deterministic is None else str(deterministic).lower() in ("1", "true", "yes"),
    }
    if given["precision"] is not None and given["precision"] not in PRECISIONS:  # bfloat16, torch.bfloat16 alike
        from orthrus.models.precision import dtype_name, parse_dtype

        given["precision"] = dtype_name(parse_dtype(given["precision"]))  # (tf32 is kept: no dtype names it)
    return base.replace(**{k: v for k, v in given.items() if v is not None})


@register_model("orthrus")
class OrthrusLM(HFLM):
    """lm-eval's `HFLM` whose generation runs `orthrus.generate` (see the `orthrus.lmeval` doc)."""

    def __init__(
        self,
        pretrained,
        options=None,
        decoding: str | None = None,
        dtype=None,
        attn_implementation: str | None = None,
        attention: str | None = None,
        block_size=None,
        eos: str | None = None,
        last_block: str | None = None,
        prefill_logits: str | None = None,
        deterministic=None,
        message: str | None = None,
        device: str | None = None,
        tokenizer=None,
        enable_thinking: bool = False,
        max_gen_toks: int = 256,
        seed: int = 1234,
        **kwargs,
    ):
        from orthrus.models.precision import configure, dtype_name

        if not isinstance(pretrained, str) and dtype is None:
            dtype = dtype_name(pretrained.dtype)  # a ready model (tests, notebooks) keeps its dtype
        self.options = lm_options(
            options,
            decoding,
            dtype,
            attn_implementation or attention,
            block_size,
            eos,
            last_block,
            prefill_logits,
            deterministic,
            message,
        )
        o = self.options
        if o.decoder not in DECODINGS:
            raise OptionsError(f"decoding must be one of {DECODINGS}, got {o.decoder!r}")
        if isinstance(pretrained, str):
            model, path = load_model(pretrained, o, device)
        else:
            from orthrus.models.precision import parse_dtype

            model, path = pretrained, getattr(pretrained, "name_or_path", None)
            configure(o.precision, deterministic=o.deterministic)
            if model.dtype != parse_dtype(o.precision):
                model = model.to(parse_dtype(o.precision))
        if DECODER[o.decoder].diffusion and not hasattr(model, "diffusion_forward"):
            raise OptionsError("decoding=orthrus needs an Orthrus model")
        kwargs.pop("dtype", None)
        kwargs.pop("backend", None)
        super().__init__(
            pretrained=model,
            tokenizer=tokenizer or path,
            backend="causal",
            enable_thinking=bool(enable_thinking),
            **kwargs,
        )
        self.decoding = o.decoder
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
        if not msgs or msgs[0]["role"] != "system":  # the run's message format (orthrus.chat)
            msgs = chat_messages(msgs[0]["content"], self.options.message) + msgs[1:] if msgs else msgs
        text = self.tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, **self.chat_template_args
        )
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

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from tqdm import tqdm

        if (
            DECODER[self.decoding].runner == "generate"
        ):  # HFLM's own loop: transformers' generate, as the authors ran it
            return super().generate_until(requests, disable_tqdm=disable_tqdm)

        from orthrus.decode.loop import generate

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
                raise ValueError(
                    f"max_gen_toks {max_gen_toks} leaves no room for the prompt (max_length {self.max_length})"
                )
            ids = ids[-max_ctx:]
            # the decode stage's loop and options; only the budget (and a task's sampling) is the request's
            options, generator = self.options.replace(max_new_tokens=max_gen_toks), None
            if sample:
                options = options.replace(
                    temperature=float(kwargs["temperature"]), top_k=kwargs.get("top_k"), top_p=kwargs.get("top_p")
                )
                generator = torch.Generator(device=self.model.device).manual_seed(
                    (self.seed + len(self.generation_log)) % 2**64
                )
            res = generate(
                self.model,
                torch.tensor(ids, dtype=torch.long, device=self.model.device),
                options,
                generator=generator,
                trace=self._stop_at(until),
            )
            tokens = res.tokens.tolist()
            text = self.tok_decode(tokens)
            text = postprocess_generated_text(
                text, until, self.think_end_token if isinstance(self.think_end_token, str) else None
            )
            out.append(text)
            st = res.stats
            self.generation_log.append(
                {
                    "task": getattr(req, "task_name", None),
                    "doc_id": getattr(req, "doc_id", None),
                    "prompt_len": len(ids),
                }
                | Trajectory.from_loop(tokens, st).columns()
                | {
                    "n_tokens": st["n_tokens"],
                    "tpf_verify": st["tpf_verify"],
                    "tpf_authors": st["tpf_authors"],
                }
            )
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
        return out

    def _stop_at(self, until: list[str]):
        """A loop trace that ends decoding once the text holds a stop string, as transformers'
        stopping criteria do: the tokens up to there are the ones a full-length run emits
        (decoding is causal), and the text is cut at the stop string afterwards either way."""
        stops = [u for u in until if u]
        if not stops:
            return None

        def trace(forward, tokens) -> bool:
            text = self.tok_decode(tokens)
            return any(u in text for u in stops)

        return trace

    def get_model_info(self) -> dict:
        # HFLM's asks the hub for the model's commit: a network call, and meaningless for a path
        m = self.model
        return {
            "model_num_parameters": sum(p.numel() for p in m.parameters()),
            "model_dtype": str(m.dtype),
            "model_path": self.pretrained_path,
            "model_commit": snapshot_commit(m.name_or_path),
            "decoding": self.decoding,
            "block_size": self.options.block_size or getattr(m.config, "block_size", None),
            "options": self.options.record(),
        }
