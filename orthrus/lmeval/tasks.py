"""Which lm-eval tasks a run may start: the task index, the primary metrics, and the checks that
refuse code-executing tasks without an explicit opt-in and IFEval without its dependencies."""

from __future__ import annotations

import os
from pathlib import Path

from orthrus.contracts import runs_model_code
from orthrus.errors import InputError


class BenchmarkError(InputError):
    """A benchmark run or table that cannot be made; the CLI prints it and exits with 2."""


CODE_EVAL_HELP = (
    "HumanEval-style tasks ({tasks}) execute code written by the model. Opt in explicitly: "
    "pass --allow-code-eval (config: benchmarks.allow_code_eval: true) AND set the environment "
    "variable HF_ALLOW_CODE_EVAL=1, preferably inside a sandbox (container/VM without credentials)."
)


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


def expand_tasks(tm, names) -> list[str]:
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
            out += expand_tasks(tm, [s if isinstance(s, str) else s.get("task", "") for s in subs])
        else:
            out.append(name)
    return out


def unsafe_tasks(tm, names) -> list[str]:
    """Tasks that execute model-written code (`unsafe_code: true`, or HumanEval by name).

    `tm=None` checks the names only (no task index needed)."""
    if tm is None:
        return [n for n in names if runs_model_code(n)]
    bad = []
    for name in expand_tasks(tm, names):
        entry = tm.task_index.get(name)
        cfg = (entry.cfg or {}) if entry is not None else {}
        if cfg.get("unsafe_code") or runs_model_code(name):
            bad.append(name)
    return bad


def check_code_eval(unsafe: list[str], allow: bool) -> None:
    if not unsafe:
        return
    if not allow or os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
        missing = [
            w
            for w, ok in (
                ("--allow-code-eval", allow),
                ("HF_ALLOW_CODE_EVAL=1", os.environ.get("HF_ALLOW_CODE_EVAL") == "1"),
            )
            if not ok
        ]
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
            raise BenchmarkError(
                "IFEval needs NLTK's punkt_tab data: run `python -m nltk.downloader punkt_tab` "
                "on a connected machine and point NLTK_DATA at it"
            ) from None


def check_tasks(tasks, include_paths=(), allow_code_eval: bool = False):
    """Every check a run needs before it loads a model; returns (task manager, unsafe tasks)."""
    if not tasks:
        raise BenchmarkError("no tasks given")
    check_code_eval(unsafe_tasks(None, tasks), allow_code_eval)  # before the (slow) task index
    tm = task_manager(include_paths, tasks)
    unknown = [t for t in tasks if t not in tm.all_tasks]
    if unknown:
        raise BenchmarkError(
            f"unknown lm-eval tasks {unknown} (include paths: {list(include_paths)}); "
            "tiny-world tasks come from `orthrus lm-eval prepare-data --out DIR` + --include-path DIR"
        )
    unsafe = unsafe_tasks(tm, tasks)
    check_code_eval(unsafe, allow_code_eval)
    check_ifeval(expand_tasks(tm, tasks))
    return tm, unsafe
