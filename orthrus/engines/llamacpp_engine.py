"""llama.cpp as an engine of the workflow (orthrus/engines/engine.py): its server (`bash
envs/build-llamacpp.sh`), one job for all its runs, a server per run (orthrus/engines/llamacpp.py),
serving GGUF files: the teacher (or its draft) converted to a type by llama.cpp's own converter (rule
gguf_export, results/gguf/MODEL-TYPE.gguf), teacher.gguf's own file (`source`), or a file given."""

from __future__ import annotations

from pathlib import Path

from orthrus.engines import openai_launch
from orthrus.engines.engine import Engine
from orthrus.errors import InputError

# a precision's GGUF type: what `gguf` defaults to for a llamacpp entry
GGUF_TYPES = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}


def converter(server: str) -> str:
    """The converter envs/build-llamacpp.sh copies beside the server (BIN/../convert)."""
    return str(Path(server).resolve().parent.parent / "convert")


def source_gguf(config) -> str:
    """teacher.gguf's own file (`gguf: source`: the file the teacher was converted from, as shipped)."""
    from orthrus.models.gguf import locate

    g = config.teacher.gguf
    if config.teacher.source != "gguf":
        raise InputError("gguf: source names teacher.gguf's file, and teacher.source is not gguf")
    return str(locate(g.path, g.package, g.file)[0])


def resolved(entry: dict, config) -> dict:
    """A llamacpp entry with `gguf: source` / `draft: source` replaced by teacher.gguf's file."""
    return entry | {k: source_gguf(config) for k in ("gguf", "draft") if entry.get(k) == "source"}


def gguf_of(entry: dict) -> str:
    """A llamacpp entry's model file: a GGUF type (f32, bf16, f16) to convert the teacher to, or a path."""
    return entry.get("gguf") or GGUF_TYPES[entry["precision"]]


def gguf_path(results: str, model: str, gguf: str) -> str:
    """Where a GGUF type's file of `model` (the teacher's name, or `draft`) is written; a path as given."""
    return f"{results}/gguf/{model}-{gguf}.gguf" if gguf in GGUF_TYPES.values() else gguf


def draft_file(entry: dict, results: str, model_file: str) -> str:
    """A draft_model run's draft: the served file itself (`self`), a GGUF file given, or teacher.draft
    converted to the type given (default: the served model's type, else the precision's)."""
    given = entry.get("draft")
    if given == "self":
        return model_file
    model = gguf_of(entry)
    return gguf_path(
        results, "draft", given or (model if model in GGUF_TYPES.values() else GGUF_TYPES[entry["precision"]])
    )


class LlamaCpp(Engine):
    name = "llamacpp"
    key, env = "engines.llamacpp_server", "ORTHRUS_LLAMACPP_SERVER"
    build, example = "bash envs/build-llamacpp.sh", ".llamacpp/bin/llama-server"
    gguf = True
    openai_server = staticmethod(openai_launch.llamacpp)
    native_completion = True
    openai_owner = "llamacpp"  # in its tree in llama-cpp-python 0.3.1 and 0.3.36
    slots_follow_load = True  # -np: llama.cpp fixes its slots, and divides its context among them, at start

    def problem(self, config, users: list[str], entries: list[dict]) -> str | None:
        # an entry that serves or drafts with a converted file needs the converter beside the server
        # (no `gguf`: the precision's type, converted)
        convert = any(
            (e.get("gguf") or "f32") in GGUF_TYPES.values() or e.get("speculative") == "draft_model" for e in entries
        )
        return self.server_problem(self.program(config), users, convert)

    def server_problem(self, server: str | None, users: list[str], convert: bool) -> str | None:
        """Why llama.cpp's server cannot run, naming the key; None where it can."""
        exe, need = self.executable(server, users)
        if exe is None:
            return need
        if convert and not (Path(converter(exe)) / "convert_hf_to_gguf.py").is_file():
            return (
                f"{self.key}: no converter beside {server!r} ({converter(exe)}/convert_hf_to_gguf.py), {need} to "
                f"convert the teacher to GGUF; `{self.build}` puts it there"
            )
        return None

    def entry_problems(self, key: str, entry: dict, config) -> list[str]:
        out = super().entry_problems(key, entry, config)
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
            if (
                value
                and value not in GGUF_TYPES.values()
                and value != "self"
                and not Path(value).expanduser().is_file()
            ):
                out.append(
                    f"{key}.{k}: {value!r} is neither a GGUF type (f32, bf16, f16){' nor self' if k == 'draft' else ''} "
                    "nor a GGUF file"
                )
        if entry.get("gguf") == "self":
            out.append(f"{key}.gguf: self is a draft's value; give a GGUF type or file")
        return out

    def run(self, name: str, entry: dict, out: str, precision: str, seed: int, config, **where) -> dict:
        """The run serves the entry's GGUF file with its KV cache's type, and drafts with its draft's file
        where a draft model proposes; `where`: results (the folder) and teacher (its name, which the
        converted files carry)."""
        entry = resolved(entry, config) | {"precision": precision}
        model = gguf_path(where["results"], where["teacher"], gguf_of(entry))
        run = super().run(name, entry, out, precision, seed, config) | {
            "model": model,
            "kv_cache": entry.get("kv_cache") or "f16",
        }
        if run["speculative"] == "draft_model":
            run["draft"] = draft_file(entry, where["results"], model)
        return run

    def inputs(self, runs: list[dict], teacher: str | list, draft: tuple[str | None, list]) -> list:
        """The GGUF files the runs serve and draft with (results/gguf/ ones a rule converts)."""
        return list(dict.fromkeys(f for r in runs for f in (r["model"], r.get("draft")) if f))

    def execute(self, program: str, model_path: str, prompts: str, runs: list[dict], threads: int) -> None:
        problem = self.server_problem(program, [f"run {r['name']}" for r in runs], convert=False)
        if problem:
            raise InputError(problem)
        from orthrus.engines import llamacpp

        try:
            llamacpp.run_all(program, prompts, runs, threads)
        except llamacpp.ServerError as e:
            raise InputError(f"llama.cpp: {e}") from None
