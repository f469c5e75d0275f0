"""One lm-eval run (model x decoder x precision x attention) and the JSON record it writes."""

from __future__ import annotations

import math

from orthrus.lmeval.lm import OrthrusLM, lm_options
from orthrus.lmeval.tasks import BenchmarkError, check_tasks
from orthrus.options import DecodeOptions

# The parts of lm-eval's result kept in the record, merged over the run's task groups.
_RESULT_KEYS = ("results", "n-samples", "higher_is_better", "versions", "configs", "samples")


def _run_group(lm, group, chat, tm, num_fewshot, limit, max_gen_toks, bootstrap_iters, unsafe, seed):
    """lm-eval over one group of tasks, with or without the chat template (lm-eval applies it to a
    whole run or not at all)."""
    from lm_eval.evaluator import simple_evaluate

    return simple_evaluate(
        model=lm,
        tasks=group,
        task_manager=tm,
        num_fewshot=num_fewshot,
        limit=limit,
        gen_kwargs={"max_gen_toks": int(max_gen_toks)} if max_gen_toks else None,
        apply_chat_template=chat,
        fewshot_as_multiturn=chat and bool(num_fewshot),
        log_samples=True,
        bootstrap_iters=bootstrap_iters,
        confirm_run_unsafe_code=bool(unsafe),
        # numpy's legacy seed takes 0 .. 2^32 - 1 only: a larger legal seed of the study is folded into it
        random_seed=seed,
        numpy_random_seed=seed % 2**32,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
    )


def evaluate(
    model_path,
    options: DecodeOptions | None = None,
    decoding=None,
    precision=None,
    attention=None,
    tasks=(),
    include_paths=(),
    limit=None,
    num_fewshot=0,
    max_gen_toks=DecodeOptions.max_new_tokens,
    chat_template=True,
    device=None,
    batch_size=1,
    bootstrap_iters=100000,
    allow_code_eval=False,
    seed=0,
    raw_tasks=(),
    lm=None,
) -> dict:
    """Run lm-eval on one model with `options` (the decode stage's `DecodeOptions`; `decoding`,
    `precision` and `attention` replace its fields when given); return the record `run` writes.

    `chat_template`: render prompts as the trajectory study does, except for the tasks in
    `raw_tasks` (plain completion prompts, e.g. lm-eval's `humaneval`). `max_gen_toks=None`:
    each task's own generation length (256, HFLM's default, where a task sets none), as the
    authors ran lm-eval."""
    tasks = list(tasks)
    tm, unsafe = check_tasks(tasks, include_paths, allow_code_eval)
    options = lm_options(options, decoding, precision, attention)
    if lm is None:
        lm = OrthrusLM(
            pretrained=str(model_path),
            options=options,
            device=device,
            max_gen_toks=max_gen_toks or 256,
            batch_size=batch_size,
            seed=seed,
        )
    raw = [t for t in tasks if t in set(raw_tasks or ())] if chat_template else list(tasks)
    # lm-eval applies the chat template to a whole run or not at all: one run per group
    groups = [(False, raw), (True, [t for t in tasks if t not in raw])]
    res: dict = {}
    for chat, group in groups:
        if not group:
            continue
        lm.reset_chat_rendering()
        part = _run_group(lm, group, chat, tm, num_fewshot, limit, max_gen_toks, bootstrap_iters, unsafe, seed)
        if part is None:
            raise BenchmarkError("lm-eval returned no results")
        for key in _RESULT_KEYS:
            res.setdefault(key, {}).update(part.get(key) or {})
    settings = {
        "limit": limit,
        "num_fewshot": num_fewshot,
        "max_gen_toks": max_gen_toks,
        "chat_template": bool(chat_template),
        "no_chat_template_tasks": raw,
        "options": lm.options.record(),
        "batch_size": batch_size,
        "bootstrap_iters": bootstrap_iters,
        "seed": seed,
        "include_paths": [str(p) for p in include_paths or ()],
    }
    return _record(lm, res, model_path, tasks, settings)


def _record(lm, res: dict, model_path, tasks, settings) -> dict:
    """The run's JSON record (without `model`, which the command line adds)."""
    import lm_eval

    from orthrus.models.precision import numerical_env

    o = lm.options
    return {
        "decoder": o.decoder,
        "precision": o.precision,
        "attention": o.attention,
        "model_path": str(model_path),
        "tasks": tasks,
        "settings": settings,
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
        rows.append(
            {
                "doc_id": s.get("doc_id"),
                "filter": s.get("filter"),
                "target": s.get("target"),
                "prompt": prompt,
                "resps": s.get("resps"),
                "filtered_resps": s.get("filtered_resps"),
                "metrics": metrics,
                "doc_hash": s.get("doc_hash"),
                "prompt_hash": s.get("prompt_hash"),
            }
        )
    return _jsonable(rows)
