"""Engines the workflow runs itself (decode.engines, sampling.engines), through one interface
(orthrus/engines/engine.py): vLLM in its own environment (vllm_engine.py), llama.cpp's server
(llamacpp_engine.py), transformers as the stand-in for an engine (transformers_engine.py); their files
ingested.

    orthrus engine-run --engine NAME --program PROGRAM [--model-path DIR] --prompts prompts.jsonl --runs JSON

A `decode.engines.NAME` entry ({engine: vllm | llamacpp, speculative: none | ngram | draft_model, k,
precision, attention, reference, ...}) becomes a decode.external entry whose file the workflow writes
(`external_entries`: results/engine/NAME.jsonl), so ingest, the tables and the forensics take it as
any engine's file; a decode.external entry with `stand_in` is the transformers engine's entry
(`standin_entries`), its file the entry's path. `jobs` groups them as their engine says (vLLM: a process per precision; llama.cpp:
one job, a server per run), `runs_spec` makes each entry its engine's run. `problems` refuses a config
whose engines cannot run, naming the key, before any job. This command hands the runs to the engine's
`execute` (vLLM: the project's recipe, orthrus/engines/vllm_recipe.py, in its environment; llama.cpp:
orthrus/engines/llamacpp.py's server) and checks that every file came back; a killed job takes the
recipe or the server with it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orthrus.engines.engine import SPECULATIVE, Engine
from orthrus.engines.launchers import SERVER_ROWS
from orthrus.engines.llamacpp_engine import converter, gguf_path
from orthrus.engines.openai_engine import OpenAI, expand
from orthrus.engines.transformers_engine import DECODERS, Transformers
from orthrus.errors import InputError

# the engines the workflow runs, by the name an entry's `engine` gives (orthrus/engines/engine.py)
ENGINES: dict[str, Engine] = {e.name: e for e in (*SERVER_ROWS, OpenAI(), Transformers())}
VLLM_ENGINE, LLAMACPP_ENGINE = ENGINES["vllm"], ENGINES["llamacpp"]
# the engines an entry's `engine` names (the config's choices), and the decoders an entry's `stand_in`
# names (the stand-in engine's)
ENGINE_CHOICES = tuple(n for n, e in ENGINES.items() if not e.stand_in)
STAND_IN_DECODERS = tuple(DECODERS.values())
PYTHON_ENV, SERVER_ENV = VLLM_ENGINE.env, LLAMACPP_ENGINE.env  # the variables that name their programs
__all__ = ["ENGINES", "SPECULATIVE", "converter", "gguf_path"]


def declared(config) -> dict:
    """decode.engines as the config gives it (each entry as data: the keys given)."""
    return {n: e.model_dump() for n, e in config.decode.engines.items()}


def entries(config) -> dict:
    """decode.engines as the workflow runs it: an openai entry as one entry per concurrency (NAME-cC,
    orthrus/engines/openai_engine.py)."""
    return expand(declared(config))


def as_engine_entry(entry: dict) -> dict:
    """An entry with `stand_in` (decode.external, sampling.engines) as the transformers engine's: the
    stand-in's decoder as the speculative method that runs it; an engine's entry as it is."""
    if not entry.get("stand_in"):
        return entry
    method = {decoder: m for m, decoder in DECODERS.items()}[entry["stand_in"]]
    return entry | {"engine": Transformers.name, "speculative": method}


def standin_entries(config) -> dict:
    """decode.external's entries with `stand_in`, as the transformers engine's entries (`path`: their file)."""
    return {n: as_engine_entry(e.model_dump()) for n, e in config.decode.external.items() if e.stand_in}


def _run_entries(config) -> dict:
    """Every entry the workflow decodes with an engine: decode.engines' and the stand-ins'."""
    return entries(config) | standin_entries(config)


def llamacpp_server(config) -> str | None:
    """llama.cpp's server: engines.llamacpp_server, else $ORTHRUS_LLAMACPP_SERVER, else None."""
    return LLAMACPP_ENGINE.program(config)


def _entry_problems(name: str, config) -> list[str]:
    """The entry's place in the study: its cell inside the decode grid, its reference a plain run at its
    precision."""
    key, decode = f"decode.engines.{name}", config.decode
    entry, out = decode.engines[name], []
    if entry.precision not in decode.precisions:
        out.append(
            f"{key}.precision: {entry.precision!r} not in decode.precisions (its ar-ref reference runs only there)"
        )
    if entry.attention is not None and entry.attention not in decode.attentions:
        out.append(f"{key}.attention: {entry.attention!r} not in decode.attentions")
    ref = entry.reference
    other = decode.engines.get(ref) if ref is not None else None
    if ref is not None and other is None:
        out.append(f"{key}.reference: {ref!r} is not an entry of decode.engines {sorted(decode.engines)}")
    elif other is not None and other.reference:
        out.append(f"{key}.reference: {ref!r} has a reference of its own; an engine pair compares with a plain run")
    elif other is not None and other.precision != entry.precision:
        out.append(
            f"{key}.reference: {ref!r} runs at {other.precision}, this at {entry.precision}: "
            "a pair compares one precision"
        )
    return out


def problems(config) -> list[str]:
    """decode.engines and engines.* rules a schema cannot state, one line per problem naming the key
    (called from the config model's whole-study rules, orthrus/plan/config/rules.py)."""
    found, out = declared(config), []
    names = {config.teacher.name, *config.models, *config.external_models, *config.decode.external}
    for name, entry in found.items():
        if name in names:
            out.append(
                f"decode.engines.{name}: the name is taken (teacher, models, external_models or decode.external)"
            )
        out += ENGINES[entry["engine"]].entry_problems(f"decode.engines.{name}", entry, config)
        out += _entry_problems(name, config)
        if entry["engine"] == OpenAI.name:  # its runs' names (NAME-cC) are taken too
            out += [
                f"decode.engines.{name}: its run {run!r} takes the name of another entry"
                for run in expand({name: entry})
                if run in names or run in found
            ]
    for engine in ENGINES.values():
        mine = sorted(n for n in found if found[n]["engine"] == engine.name)
        if mine:
            problem = engine.problem(config, [f"decode.engines.{n}" for n in mine], [found[n] for n in mine])
            out += [problem] if problem else []
    return out


def serves_gguf(entries) -> bool:
    """Whether an entry's engine serves GGUF files, so the workflow converts the teacher for it (rule
    gguf_export)."""
    return any(e.get("engine") in ENGINES and ENGINES[e["engine"]].serves_gguf(e) for e in entries)


def engine_file(results: str, name: str) -> str:
    return f"{results}/engine/{name}.jsonl"


def external_entries(config, results: str) -> dict:
    """Each decode.engines entry as the decode.external entry of the file the workflow writes for it."""
    attentions = config.decode.attentions
    return {
        name: {
            "path": engine_file(results, name),
            "precision": e["precision"],
            "attention": e.get("attention") or attentions[0],
            **({"reference": e["reference"]} if e.get("reference") else {}),
        }
        for name, e in entries(config).items()
    }


def jobs(config) -> dict[str, list[str]]:
    """{job: the names of its engine runs}, as each entry's engine groups them (vLLM: one job, one
    process, per precision; llama.cpp: one job, a server a run; transformers: one job)."""
    groups: dict[str, list[str]] = {}
    for name, e in _run_entries(config).items():
        groups.setdefault(ENGINES[e["engine"]].job(e), []).append(name)
    return groups


def job_engine(config, names: list[str]) -> Engine:
    """The engine of a job's runs (one job, one engine)."""
    return ENGINES[_run_entries(config)[names[0]]["engine"]]


def runs_spec(config, names: list[str], results: str, draft: str | None, teacher: str = "") -> list[dict]:
    """The runs of the decode.engines entries `names`, as their engine makes them (`teacher`: the
    teacher's name, which converted model files carry; `draft`: the study's draft's path)."""
    found = _run_entries(config)
    return [
        ENGINES[found[n]["engine"]].run(
            n,
            found[n],
            found[n].get("path") or engine_file(results, n),
            found[n]["precision"],
            config.seed,
            config,
            results=results,
            teacher=teacher,
            draft=draft,
        )
        for n in names
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus engine-run", description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=sorted(ENGINES), default="vllm")
    ap.add_argument(
        "--program",
        default="",
        help="the engine's program (vllm: its environment's Python; llamacpp: the server; transformers: none)",
    )
    ap.add_argument("--model-path", default="", help="the model directory the engine serves, where it takes one")
    ap.add_argument("--prompts", required=True, help="the export (orthrus export-prompts)")
    ap.add_argument("--runs", required=True, help="JSON: the runs (runs_spec)")
    ap.add_argument("--threads", type=int, default=1, help="the engine's threads")
    args = ap.parse_args(argv)
    runs = json.loads(args.runs)
    ENGINES[args.engine].execute(args.program, args.model_path, args.prompts, runs, args.threads)
    missing = [r["out"] for r in runs if not Path(r["out"]).is_file()]
    if missing:
        raise InputError(f"the {args.engine} runs exited 0 but wrote no {', '.join(missing)}")
    print(f"[engine-run] {len(runs)} runs -> {', '.join(r['out'] for r in runs)}", file=sys.stderr)
    return 0
