"""Downstream benchmarks through lm-evaluation-harness (Table 7): the `orthrus` lm-eval model.

The model (`--model orthrus`) is lm-eval's Hugging Face model class (`HFLM`) with our decoding:

- loading: `OrthrusForCausalLM.from_pretrained(pretrained, dtype=..., attn_implementation=...)`,
  handed to `HFLM` as a ready model; with `decoding=ar` a plain Qwen3 checkpoint (the teacher)
  is accepted too and decoded by the same AR loop;
- generation (`generate_until`): `orthrus.generate(model, ids, mode=decoding)`, one request at a
  time (batch size 1), greedy unless the task asks to sample. Generation stops at EOS or at
  `max_gen_toks`; the task's `until` stop strings are applied to the decoded text afterwards.
  That is the same text as stopping early (decoding is causal: later tokens never change
  earlier ones), and the token stream stays the trajectory study's (no re-prefill);
- log-likelihood requests: `HFLM`'s own code, i.e. the model's normal forward = the AR view;
- chat rendering (when lm-eval applies a chat template, `--apply_chat_template`, the default of
  `orthrus lm-eval run`): exactly `orthrus.chat.render_chat`: an empty system message
  (`system_message=` to change it), the user turn, the assistant turn opened, thinking
  disabled; a task's assistant prefix (`gen_prefix`) is appended verbatim after that. Contexts
  rendered this way are tokenized without added special tokens, as `render_chat` does.

Model arguments (`--model_args`): `pretrained=DIR|HUB_ID`, `decoding=orthrus|ar`,
`decoding=ar-ref` (lm-eval's own HFLM generation), `dtype=bf16|fp16|fp32` (or bfloat16/float16/float32; default fp32), `attn_implementation=eager|sdpa|...`
(alias `attention`), `block_size=K` (default: the checkpoint's), `device=cpu|cuda`,
`system_message=`, `enable_thinking=False`, `max_gen_toks=N` (default when a task sets none),
`seed=N` (sampling only), `deterministic=True`, and `HFLM`'s `batch_size` (log-likelihood only).

Command line (`orthrus lm-eval <sub>` or `python -m orthrus.lmeval <sub>`):

    prepare-data --out DIR [--n 40] [--seed 0] [--tasks tiny_arith,tiny_gec,tiny_qa,tiny_code,tiny_translate]
                 [--exclude PROMPTS.parquet ...]
    run   --model-path DIR --decoding orthrus|ar --precision bf16|fp16|fp32 --attention eager|sdpa
          --tasks T1,T2 [--include-path DIR ...] [--limit N] [--max-gen-toks 128|task]
          [--num-fewshot 0] [--no-chat-template] [--no-chat-template-tasks T,...]
          [--model-name NAME] [--device cpu|cuda]
          [--allow-code-eval] --out results/benchmarks/{model}-{decoder}-{precision}-{attention}.json
    table --inputs A.json B.json ... --out results/tables/benchmarks.csv
          [--agreement-out results/tables/benchmarks_agreement.csv] [--figure results/figures/benchmarks]
    cli   [lm-eval's own arguments]     # lm-eval's CLI with the `orthrus` model registered, e.g.
          cli run --model orthrus --model_args pretrained=DIR,decoding=orthrus,dtype=bf16
              --tasks gsm8k --num_fewshot 0 --apply_chat_template --gen_kwargs max_gen_toks=128

Paper configuration: lm-eval's built-in `gsm8k` (metric `exact_match,flexible-extract`),
`humaneval` (`pass@1,create_test`) and `ifeval` (`prompt_level_loose_acc,none`,
`prompt_level_strict_acc,none`). Their datasets come from the hub (openai/gsm8k,
openai/openai_humaneval, google/IFEval); on an offline cluster fill the `datasets` cache once
on a connected machine (same `HF_HOME`/`HF_DATASETS_CACHE`) and run with `HF_HUB_OFFLINE=1`
(and `HF_DATASETS_OFFLINE=1`). IFEval needs the packages `langdetect`, `immutabledict` and
`nltk` with its `punkt_tab` data (`python -m nltk.downloader punkt_tab`, or set `NLTK_DATA`).
HumanEval executes model-written code: `run` refuses unless it gets `--allow-code-eval` and the
environment has `HF_ALLOW_CODE_EVAL=1`. lm-eval's `humaneval` is a plain completion prompt
(the function header); with the chat template use its chat variant `humaneval_instruct` (an
assistant prefix opens a code block), or keep `humaneval` with `--no-chat-template-tasks
humaneval`.
"""
from __future__ import annotations

if __name__ == "__main__":  # `python -m orthrus.lmeval`: run the package module, so the model is registered once
    import sys

    from orthrus.lmeval import main as _main

    sys.exit(_main())

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path

import torch

from orthrus.io import atomic_path, save_figure, write_json, write_table

log = logging.getLogger("orthrus.lmeval")

# ar-ref: lm-eval's own HFLM generation (transformers' generate, stop strings as stopping
# criteria), the baseline as the authors ran it; ar: the AR view through our loop.
DECODINGS = ("orthrus", "ar", "ar-ref")
# The metric each task contributes to Table 7 (all metrics go into the tables; these are marked
# `primary` and drawn in the figure).
PRIMARY_METRICS = {
    "gsm8k": ["exact_match,flexible-extract"],
    "humaneval": ["pass@1,create_test"],
    "humaneval_instruct": ["pass@1,create_test"],
    "ifeval": ["prompt_level_loose_acc,none", "prompt_level_strict_acc,none"],
    "tiny_arith": ["exact_match,flexible-extract"],
    "tiny_gec": ["exact_match,none"],
    "tiny_qa": ["acc,none"],
    "tiny_code": ["exact_match,none"],
    "tiny_translate": ["exact_match,none"],
}
CODE_EVAL_HELP = (
    "HumanEval-style tasks ({tasks}) execute code written by the model. Opt in explicitly: "
    "pass --allow-code-eval (config: benchmarks.allow_code_eval: true) AND set the environment "
    "variable HF_ALLOW_CODE_EVAL=1, preferably inside a sandbox (container/VM without credentials)."
)


# --------------------------------------------------------------------------- lm-eval's HFLM


from lm_eval.models.huggingface import HFLM  # noqa: E402

from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text  # noqa: E402


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
    """lm-eval's `HFLM` whose generation runs `orthrus.generate` (see the module doc)."""

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


# --------------------------------------------------------------------------- task checks


def task_manager(include_paths=(), tasks=None):
    """lm-eval's TaskManager over the built-in tasks plus `include_paths`.

    When every name in `tasks` is defined in `include_paths` (the tiny-world tasks), the
    built-in tasks are not indexed at all: that scan of thousands of YAML files takes seconds.
    """
    from lm_eval.tasks import TaskManager

    paths = [str(Path(p).resolve()) for p in include_paths or ()]
    if tasks and paths:
        tm = TaskManager(include_path=paths, include_defaults=False)
        if all(t in tm.all_tasks for t in tasks):
            return tm
    return TaskManager(include_path=paths or None)


def _expand(tm, names) -> list[str]:
    """Task names behind task/group/tag names (one level of groups is enough for our checks)."""
    from lm_eval.tasks._index import Kind

    out = []
    for name in names:
        entry = tm.task_index.get(name)
        if entry is None:
            out.append(name)
        elif entry.kind == Kind.TAG:
            out += sorted(entry.tags)
        elif entry.kind == Kind.GROUP:
            subs = (entry.cfg or {}).get("task") or []
            out += _expand(tm, [s if isinstance(s, str) else s.get("task", "") for s in subs])
        else:
            out.append(name)
    return out


def unsafe_tasks(tm, names) -> list[str]:
    """Tasks that execute model-written code (`unsafe_code: true`, or HumanEval by name).

    `tm=None` checks the names only (no task index needed)."""
    if tm is None:
        return [n for n in names if "humaneval" in n]
    bad = []
    for name in _expand(tm, names):
        entry = tm.task_index.get(name)
        cfg = (entry.cfg or {}) if entry is not None else {}
        if cfg.get("unsafe_code") or "humaneval" in name:
            bad.append(name)
    return bad


class BenchmarkError(RuntimeError):
    pass


def check_code_eval(unsafe: list[str], allow: bool) -> None:
    if not unsafe:
        return
    if not allow or os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
        missing = [w for w, ok in (("--allow-code-eval", allow),
                                    ("HF_ALLOW_CODE_EVAL=1", os.environ.get("HF_ALLOW_CODE_EVAL") == "1")) if not ok]
        raise BenchmarkError(CODE_EVAL_HELP.format(tasks=", ".join(unsafe)) + f" Missing: {', '.join(missing)}.")


def check_ifeval(names) -> None:
    """IFEval's extra packages and NLTK data, checked up front with a message saying what to do."""
    if not any(n.startswith("ifeval") for n in names):
        return
    import importlib.util

    missing = [m for m in ("langdetect", "immutabledict", "nltk") if importlib.util.find_spec(m) is None]
    if missing:
        raise BenchmarkError(f"IFEval needs the packages {', '.join(missing)} (pip install 'lm-eval[ifeval]')")
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab")
    except LookupError:
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            raise BenchmarkError("IFEval needs NLTK's punkt_tab data: run `python -m nltk.downloader punkt_tab` "
                                 "on a connected machine and point NLTK_DATA at it") from None


# --------------------------------------------------------------------------- run


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "item"):
        return _jsonable(x.item())
    return str(x)


def _sample_rows(samples: list[dict]) -> list[dict]:
    rows = []
    for s in samples:
        metrics = {m: s.get(m) for m in s.get("metrics", [])}
        args = s.get("arguments") or []
        prompt = None
        if args:
            a0 = args[0]
            a0 = a0.get("arg_0") if isinstance(a0, dict) else a0
            prompt = a0[0] if isinstance(a0, (list, tuple)) and a0 else a0
        rows.append({"doc_id": s.get("doc_id"), "filter": s.get("filter"), "target": s.get("target"),
                     "prompt": prompt, "resps": s.get("resps"), "filtered_resps": s.get("filtered_resps"),
                     "metrics": metrics, "doc_hash": s.get("doc_hash"), "prompt_hash": s.get("prompt_hash")})
    return _jsonable(rows)


def evaluate(model_path, decoding="orthrus", precision="fp32", attention="eager", tasks=(), include_paths=(),
             limit=None, num_fewshot=0, max_gen_toks=128, chat_template=True, system_message="", device=None,
             batch_size=1, bootstrap_iters=100000, allow_code_eval=False, seed=0, raw_tasks=(), lm=None) -> dict:
    """Run lm-eval on one model x decoder x precision x attention; return the record `run` writes.

    `chat_template`: render prompts as the trajectory study does, except for the tasks in
    `raw_tasks` (plain completion prompts, e.g. lm-eval's `humaneval`). `max_gen_toks=None`:
    each task's own generation length (256, HFLM's default, where a task sets none), as the
    authors ran lm-eval."""
    import lm_eval
    from lm_eval.evaluator import simple_evaluate

    from orthrus.precision import dtype_name, numerical_env, parse_dtype

    tasks = list(tasks)
    if not tasks:
        raise BenchmarkError("no tasks given")
    check_code_eval(unsafe_tasks(None, tasks), allow_code_eval)  # before the (slow) task index
    tm = task_manager(include_paths, tasks)
    unknown = [t for t in tasks if t not in tm.all_tasks]
    if unknown:
        raise BenchmarkError(f"unknown lm-eval tasks {unknown} (include paths: {list(include_paths)}); "
                             "tiny-world tasks come from `orthrus lm-eval prepare-data --out DIR` + --include-path DIR")
    unsafe = unsafe_tasks(tm, tasks)
    check_code_eval(unsafe, allow_code_eval)
    check_ifeval(_expand(tm, tasks))
    if lm is None:
        lm = OrthrusLM(pretrained=str(model_path), decoding=decoding, dtype=precision, attn_implementation=attention,
                       device=device, system_message=system_message, max_gen_toks=max_gen_toks or 256, batch_size=batch_size,
                       seed=seed)
    raw = [t for t in tasks if t in set(raw_tasks or ())] if chat_template else list(tasks)
    groups = [(False, raw), (True, [t for t in tasks if t not in raw])]
    res: dict = {}
    for chat, group in groups:
        if not group:
            continue
        lm._chat_rendered = False
        part = simple_evaluate(
            model=lm, tasks=group, task_manager=tm, num_fewshot=num_fewshot, limit=limit,
            gen_kwargs={"max_gen_toks": int(max_gen_toks)} if max_gen_toks else None,
            apply_chat_template=chat, fewshot_as_multiturn=chat and bool(num_fewshot),
            log_samples=True, bootstrap_iters=bootstrap_iters, confirm_run_unsafe_code=bool(unsafe),
            random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
        )
        if part is None:
            raise BenchmarkError("lm-eval returned no results")
        for key in ("results", "n-samples", "higher_is_better", "versions", "configs", "samples"):
            res.setdefault(key, {}).update(part.get(key) or {})
    return {
        "decoder": decoding, "precision": dtype_name(parse_dtype(precision)), "attention": attention,
        "model_path": str(model_path), "tasks": tasks,
        "settings": {"limit": limit, "num_fewshot": num_fewshot, "max_gen_toks": max_gen_toks,
                     "chat_template": bool(chat_template), "no_chat_template_tasks": raw,
                     "system_message": system_message,
                     "batch_size": batch_size, "bootstrap_iters": bootstrap_iters, "seed": seed,
                     "include_paths": [str(p) for p in include_paths or ()]},
        "results": _jsonable(res.get("results", {})),
        "n_samples": _jsonable(res.get("n-samples", {})),
        "higher_is_better": _jsonable(res.get("higher_is_better", {})),
        "versions": _jsonable(res.get("versions", {})),
        "configs": _jsonable(res.get("configs", {})),
        "samples": {t: _sample_rows(s) for t, s in (res.get("samples") or {}).items()},
        "generations": _jsonable(getattr(lm, "generation_log", [])),
        "env": _jsonable(numerical_env(lm.model)),
        "lm_eval_version": getattr(lm_eval, "__version__", None),
    }


# --------------------------------------------------------------------------- tables


TABLE_COLUMNS = ["model", "decoder", "precision", "attention", "task", "metric", "value", "stderr", "n", "primary"]
AGREEMENT_COLUMNS = ["model", "decoder", "reference_model", "reference_decoder", "precision", "attention", "task",
                     "metric", "n", "n_responses_differ", "n_answers_differ", "value", "reference_value",
                     "score_diff", "stderr", "reference_stderr", "combined_stderr", "paired_stderr",
                     "within_stderr"]


def _num(x):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return x


def result_rows(rec: dict) -> list[dict]:
    rows = []
    for task, metrics in sorted((rec.get("results") or {}).items()):
        n = (rec.get("n_samples") or {}).get(task, {})
        n = n.get("effective", n.get("original")) if isinstance(n, dict) else n
        for key, value in sorted(metrics.items()):
            if "," not in key or "_stderr," in key:  # metrics are "name,filter"; skip alias, sample_len...
                continue
            name, _, filt = key.partition(",")
            stderr = metrics.get(f"{name}_stderr,{filt}")
            rows.append({"model": rec["model"], "decoder": rec["decoder"], "precision": rec["precision"],
                         "attention": rec["attention"], "task": task, "metric": key, "value": _num(value),
                         "stderr": _num(stderr), "n": n,
                         "primary": key in PRIMARY_METRICS.get(task, [])})
    return rows


def _answer(filtered):
    """What the metric scored: the filtered text, or the chosen option of a multiple-choice doc."""
    if isinstance(filtered, list) and filtered and all(isinstance(r, list) and len(r) == 2 for r in filtered):
        lls = [_num(r[0]) for r in filtered]
        return max(range(len(lls)), key=lambda i: lls[i])
    if isinstance(filtered, list) and len(filtered) == 1:
        return filtered[0]
    return json.dumps(filtered, sort_keys=True)


def _response(resps):
    """The generated text of a sample; None when nothing was generated (a log-likelihood
    request's `resps` are scores, [[log-likelihood, is-greedy]] per choice, not a response)."""
    if isinstance(resps, list) and resps and isinstance(resps[0], list) and resps[0] and isinstance(resps[0][0], str):
        return resps[0][0]
    if isinstance(resps, str):
        return resps
    return None


def _n_responses_differ(a: dict, b: dict, common) -> int | None:
    """How many common samples got different generated text; None (NaN in the tables) for a
    task without generated responses (log-likelihood / multiple choice: there only the chosen
    answer, `n_answers_differ`, is compared; their log-likelihoods differ in the last bits
    between any two numerically different runs and say nothing about agreement)."""
    if any(a[d][0] is None or b[d][0] is None for d in common):
        return None
    return sum(a[d][0] != b[d][0] for d in common)


def _per_sample(rec: dict, task: str, metric: str) -> dict:
    """doc_id -> (response, answer, per-sample metric value) for one task/metric of one record."""
    name, _, filt = metric.partition(",")
    out = {}
    for s in (rec.get("samples") or {}).get(task, []):
        if filt and s.get("filter") not in (filt, None):
            continue
        out[s["doc_id"]] = (_response(s.get("resps")), _answer(s.get("filtered_resps")),
                            (s.get("metrics") or {}).get(name))
    return out


def _is_ar(rec: dict) -> bool:
    return rec["decoder"] in ("ar", "ar-ref")


def _find_reference(rec: dict, records: list[dict], reference_model: str | None):
    same = [r for r in records if _is_ar(r) and r["precision"] == rec["precision"] and r["attention"] == rec["attention"]]
    for r in same:
        if r["model"] == rec["model"]:
            return r
    if reference_model:
        return next((r for r in same if r["model"] == reference_model), None)
    others = {r["model"] for r in same}
    return same[0] if len(others) == 1 else None


def agreement_rows(records: list[dict], reference_model: str | None = None) -> list[dict]:
    """Each non-AR run against its AR reference at the same precision and attention: the AR view
    of the same model if it was run, else `reference_model` (e.g. the teacher)."""
    rows = []
    for rec in records:
        if _is_ar(rec):
            continue
        ref = _find_reference(rec, records, reference_model)
        if ref is None:
            continue
        ref_rows = {(r["task"], r["metric"]): r for r in result_rows(ref)}
        for row in result_rows(rec):
            rr = ref_rows.get((row["task"], row["metric"]))
            if rr is None:
                continue
            a, b = _per_sample(rec, row["task"], row["metric"]), _per_sample(ref, row["task"], row["metric"])
            common = sorted(set(a) & set(b), key=str)
            diffs = []
            for d in common:
                va, vb = _num(a[d][2]), _num(b[d][2])
                if not (math.isnan(va) or math.isnan(vb)):
                    diffs.append(va - vb)
            if len(diffs) >= 2:
                mean = sum(diffs) / len(diffs)
                var = sum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1)
                paired = math.sqrt(var / len(diffs))
            else:
                paired = math.nan
            se, rse = row["stderr"], rr["stderr"]
            combined = math.sqrt(se ** 2 + rse ** 2) if not (math.isnan(se) or math.isnan(rse)) else math.nan
            diff = row["value"] - rr["value"]
            within = None if math.isnan(combined) else bool(abs(diff) <= combined + 1e-12)
            rows.append({"model": rec["model"], "decoder": rec["decoder"], "reference_model": ref["model"],
                         "reference_decoder": ref["decoder"], "precision": rec["precision"],
                         "attention": rec["attention"], "task": row["task"], "metric": row["metric"],
                         "n": len(common), "n_responses_differ": _n_responses_differ(a, b, common),
                         "n_answers_differ": sum(a[d][1] != b[d][1] for d in common),
                         "value": row["value"], "reference_value": rr["value"], "score_diff": diff,
                         "stderr": se, "reference_stderr": rse, "combined_stderr": combined,
                         "paired_stderr": paired, "within_stderr": within})
    return rows


def load_records(paths) -> list[dict]:
    recs = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        for k in ("model", "decoder", "precision", "attention", "results"):
            if k not in rec:
                raise BenchmarkError(f"{p}: not an `orthrus lm-eval run` output (no {k!r})")
        recs.append(rec)
    keys = [(r["model"], r["decoder"], r["precision"], r["attention"]) for r in recs]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise BenchmarkError(f"several inputs for {sorted(dup)}")
    return recs


def benchmark_figure(df, stem) -> list[Path]:
    """Grouped bars: one panel per task/metric (primary metrics), model/decoder groups, a bar per
    precision/attention, stderr error bars. PNG and PDF."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    d = df[df["primary"]] if len(df) and df["primary"].any() else df
    panels = list(dict.fromkeys(zip(d["task"], d["metric"]))) if len(d) else []
    ncol = max(1, min(3, len(panels)))
    nrow = max(1, math.ceil(len(panels) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.4 * nrow), squeeze=False)
    if not panels:
        ax = axes[0][0]
        ax.text(0.5, 0.5, "no benchmark results", ha="center", va="center", transform=ax.transAxes, color="0.3")
        ax.set_xticks([])
        ax.set_yticks([])
    for ax, (task, metric) in zip(axes.flat, panels):
        p = d[(d["task"] == task) & (d["metric"] == metric)]
        groups = list(dict.fromkeys(p["model"] + "/" + p["decoder"]))
        order = {"bf16": 0, "fp16": 1, "fp32": 2}
        series = sorted(dict.fromkeys(p["precision"] + "/" + p["attention"]),
                        key=lambda s: (order.get(s.split("/")[0], 9), s))
        width = 0.8 / max(1, len(series))
        x = np.arange(len(groups))
        for i, s in enumerate(series):
            q = p[(p["precision"] + "/" + p["attention"]) == s]
            lookup = {g: r for g, r in zip(q["model"] + "/" + q["decoder"], q.itertuples())}
            vals = [lookup[g].value if g in lookup else np.nan for g in groups]
            errs = [lookup[g].stderr if g in lookup else np.nan for g in groups]
            ax.bar(x + (i - (len(series) - 1) / 2) * width, vals, width, yerr=np.nan_to_num(errs), capsize=2, label=s)
        ax.set_xticks(x)
        ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{task}\n{metric}", fontsize=9)
        ax.set_ylim(0, 1.05)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) or 1:]:
        ax.axis("off")
    fig.tight_layout()
    written = save_figure(fig, stem)
    plt.close(fig)
    return written


def make_tables(inputs, out, agreement_out=None, figure=None, reference_model=None) -> list[Path]:
    import pandas as pd

    recs = load_records(inputs)
    rows = [r for rec in recs for r in result_rows(rec)]
    df = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    df = df.sort_values(["task", "metric", "model", "decoder", "precision", "attention"], kind="stable")
    out = Path(out)
    agreement_out = Path(agreement_out) if agreement_out else out.with_name(out.stem + "_agreement.csv")
    figure = figure or str(out.with_suffix(""))
    write_table(df, out)
    ag = pd.DataFrame(agreement_rows(recs, reference_model), columns=AGREEMENT_COLUMNS)
    write_table(ag, agreement_out)
    figs = benchmark_figure(df, figure)
    return [out, out.with_suffix(".md"), agreement_out, agreement_out.with_suffix(".md"), *figs]


# --------------------------------------------------------------------------- CLI


def _gen_cap(v: str) -> int | None:
    """`--max-gen-toks`: a positive cap, or 'task' (None: each task's own generation length)."""
    if v == "task":
        return None
    if int(v) < 1:
        raise argparse.ArgumentTypeError("a positive integer or 'task'")
    return int(v)


def _split(s: str | None) -> list[str]:
    return [t.strip() for t in (s or "").split(",") if t.strip()]


def cmd_prepare_data(args) -> int:
    from orthrus.world import benchmarks as bm

    tasks = _split(args.tasks) or list(bm.TASKS)
    exclude = set()
    for p in args.exclude or []:
        from orthrus.prompts import read_prompt_set

        exclude |= set(read_prompt_set(p)["prompt"])
    out = Path(args.out).resolve()
    manifest = {"seed": args.seed, "n": args.n, "stream": bm.STREAM, "tasks": {}, "excluded_prompt_sets": args.exclude or []}
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for task in tasks:
            docs = bm.make_docs(task, args.n, seed=args.seed, exclude=exclude)
            if len(docs) < args.n:
                print(f"[lm-eval] {task}: only {len(docs)} distinct documents of {args.n}", file=sys.stderr)
            bm.write_task(tmp, task, docs, final_dir=out)
            manifest["tasks"][task] = {"n": len(docs), "domain": bm.TASKS[task], "data": f"{task}.jsonl",
                                       "yaml": f"{task}.yaml", "primary_metrics": PRIMARY_METRICS.get(task, [])}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"[lm-eval] wrote {', '.join(tasks)} to {out} (use --include-path {out})", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    from orthrus.precision import configure

    configure(args.precision, deterministic=True, threads=args.threads)
    try:
        rec = evaluate(args.model_path, decoding=args.decoding, precision=args.precision, attention=args.attention,
                       tasks=_split(args.tasks), include_paths=args.include_path or [], limit=args.limit,
                       num_fewshot=args.num_fewshot, max_gen_toks=args.max_gen_toks,
                       chat_template=args.chat_template, system_message=args.system_message, device=args.device,
                       batch_size=args.batch_size, bootstrap_iters=args.bootstrap_iters,
                       allow_code_eval=args.allow_code_eval, seed=args.seed,
                       raw_tasks=_split(args.no_chat_template_tasks))
    except BenchmarkError as exc:
        sys.stderr.write(f"orthrus lm-eval run: error: {exc}\n")
        return 2
    rec = {"model": args.model_name or Path(str(args.model_path).rstrip("/")).name, **rec}
    write_json(args.out, rec)
    for row in result_rows(rec):
        if row["primary"]:
            print(f"[lm-eval] {rec['model']} {rec['decoder']} {rec['precision']} {row['task']} {row['metric']}: "
                  f"{row['value']:.4f} +- {row['stderr']:.4f}", file=sys.stderr)
    return 0


def cmd_table(args) -> int:
    try:
        written = make_tables(args.inputs, args.out, args.agreement_out, args.figure, args.reference)
    except BenchmarkError as exc:
        sys.stderr.write(f"orthrus lm-eval table: error: {exc}\n")
        return 2
    for p in written:
        print(p)
    return 0


def cmd_cli(argv) -> int:
    """lm-eval's own command line, with the `orthrus` model registered (this module is loaded)."""
    from lm_eval.__main__ import cli_evaluate

    saved = sys.argv
    sys.argv = ["lm-eval", *argv]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="orthrus lm-eval", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("prepare-data", help="tiny-world task data + lm-eval YAMLs into a directory")
    p.add_argument("--out", required=True, help="directory (written atomically; pass it as --include-path)")
    p.add_argument("--n", type=int, default=40, help="documents per task")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tasks", help="comma-separated subset of tiny_arith,tiny_gec,tiny_qa,tiny_code,tiny_translate (default: all)")
    p.add_argument("--exclude", nargs="*", help="prompt-set Parquet files whose prompts must not be used")
    p.set_defaults(func=cmd_prepare_data)

    p = sub.add_parser("run", help="evaluate one model x decoder x precision x attention")
    p.add_argument("--model-path", required=True)
    p.add_argument("--model-name", help="name in the tables (default: the path's last component)")
    p.add_argument("--decoding", choices=DECODINGS, default="orthrus")
    p.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--attention", default="eager", help="eager | sdpa | flash_attention_2")
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    p.add_argument("--include-path", action="append", help="extra task directory (repeatable)")
    p.add_argument("--limit", type=float, help="documents per task (lm-eval --limit; <1 = fraction)")
    p.add_argument("--num-fewshot", type=int, default=0)
    p.add_argument("--max-gen-toks", type=_gen_cap, default=128,
                   help="generation cap per request (the study's 128), or 'task' for each task's own max_gen_toks")
    p.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=True,
                   help="render prompts as the trajectory study does (render_chat); default on")
    p.add_argument("--no-chat-template-tasks",
                   help="comma-separated tasks given plain completion prompts even with the chat template "
                        "(e.g. humaneval; or use humaneval_instruct with the chat template)")
    p.add_argument("--system-message", default="")
    p.add_argument("--device", help="cpu | cuda (default: cuda if available)")
    p.add_argument("--batch-size", type=int, default=1, help="log-likelihood batch size (generation is always 1)")
    p.add_argument("--bootstrap-iters", type=int, default=100000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int)
    p.add_argument("--allow-code-eval", action="store_true",
                   help="allow tasks that run model-written code (also needs HF_ALLOW_CODE_EVAL=1)")
    p.add_argument("--out", required=True, help="JSON: aggregated results, per-sample outputs, numerical env")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("table", help="benchmarks.csv/.md, the AR-vs-Orthrus agreement table and a figure")
    p.add_argument("--inputs", nargs="*", default=[], help="JSON files written by `run`")
    p.add_argument("--out", required=True, help="CSV (a Markdown twin is written beside it)")
    p.add_argument("--agreement-out", help="default: <out stem>_agreement.csv")
    p.add_argument("--figure", help="figure path without extension (PNG and PDF); default: <out without .csv>")
    p.add_argument("--reference", help="AR model to compare against when a model has no AR run of its own")
    p.set_defaults(func=cmd_table)

    sub.add_parser("cli", help="lm-eval's own CLI with the `orthrus` model registered", add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "cli":
        return cmd_cli(argv[1:])
    args = build_parser().parse_args(argv)
    if args.cmd == "run" and args.limit is not None and args.limit >= 1:
        args.limit = int(args.limit)
    return args.func(args) or 0
