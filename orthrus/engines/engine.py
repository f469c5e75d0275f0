"""The engine interface: what the workflow needs of an engine it runs itself (decode.engines,
sampling.engines), as hooks an engine overrides where it differs from the default. The rules and the
plan ask an engine (orthrus/engines/runner.py's ENGINES) for a job's grouping, inputs, runs and
program, never which engine it is; `orthrus engine-run` hands the runs to its `execute`.

    problem(config, users)            can the engine run here at all (its program built, found)
    entry_problems(key, entry, config) the entry's settings this engine refuses, naming the key (in
                                      decode.engines and sampling.engines alike)
    job(entry)                        which job runs the entry (entries of one job share a process)
    run(name, entry, out, ...)        the run an entry becomes: its model files, width, seed, ...
    inputs(runs, teacher, draft)      the files a job reads (the workflow reruns it when they change)
    model_path(teacher)               the model directory the program is handed, where it takes one
    serves_gguf(entry)                whether the entry's runs serve GGUF files the workflow converts
    openai_server(run, threads, prompts)  its OpenAI-compatible server's command (an openai entry's launch)
    execute(program, model, prompts, runs, threads)   start, decode greedy or sampled, stop

`config` is the checked study config (orthrus/plan/config's StudyConfig), read by its attributes; an
entry is data, the keys its config entry was given (an openai entry's runs are made by the engine,
orthrus/engines/openai_engine.py), and a run is the JSON its `execute` takes in another process.

Its attributes say what its rules need: `gguf` (the teacher converted to GGUF files) and `stand_in`
(an entry's `stand_in` chooses it, not `engine`). An engine's program is one executable (`key` in the
config, else the environment variable `env`, built by `build`): vLLM's environment's Python, llama.cpp's
server.
"""

from __future__ import annotations

import os
import shutil

SPECULATIVE = ("none", "ngram", "draft_model", "eagle3")


def drafts_with(runs: list[dict], draft: str | None) -> bool:
    """Whether a run drafts with `draft` (the study's draft's path; None: there is none)."""
    return draft is not None and any(r.get("draft") == draft for r in runs)


class Engine:
    name = ""
    key = ""  # the config key of the engine's program (engines.*)
    env = ""  # the environment variable that names it where the key is not set
    build = ""  # the documented command that builds it
    example = ""  # a value of `key`
    speculative = ("none", "ngram", "draft_model")  # the methods it runs
    # what the workflow asks of an engine beyond its hooks: it serves GGUF files (the rule gguf_export
    # converts the teacher for it); it is the stand-in, which an entry's `stand_in` chooses (and
    # `engine` does not)
    gguf = False
    stand_in = False
    # behind the OpenAI engine (an openai entry's `launch: NAME`, orthrus/engines/openai_engine.py): the
    # function that makes the command of this engine's OpenAI-compatible server for a run
    # (orthrus/engines/openai_launch.py), None where it has none; whether its slots follow the load (a
    # start per concurrency) or one start serves every concurrency
    openai_server = None
    slots_follow_load = False
    # whether that server also answers llama.cpp's own /completion (an entry's `api`), and the `owned_by`
    # its /v1/models writes, by which a server given by url is known (its dialect, its record's engine)
    native_completion = False
    openai_owner = ""

    def program(self, config) -> str | None:
        """The engine's program: the config's `key`, else $`env`, else None."""
        return getattr(config.engines, self.key.split(".", 1)[1]) or os.environ.get(self.env) or None

    def executable(self, value: str | None, users: list[str]) -> tuple[str | None, str]:
        """(the program's path, "needed by ..." for later messages), or (None, why it is unusable)."""
        need = f"needed by {users[0]}" + (f" and {len(users) - 1} more" if len(users) > 1 else "")
        if not value:
            return (
                None,
                f"{self.key}: not set (nor {self.env}), {need}: build it with `{self.build}` and set {self.key}: {self.example}",
            )
        exe = shutil.which(value) or value
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            return None, f"{self.key}: {value!r} is not an executable file ({need}; build it with `{self.build}`)"
        return exe, need

    def problem(self, config, users: list[str], entries: list[dict]) -> str | None:
        """Why the engine cannot run for `users` (the entries' keys), naming the key; None where it can."""
        exe, need = self.executable(self.program(config), users)
        return None if exe else need

    def entry_problems(self, key: str, entry: dict, config) -> list[str]:
        """`key`: the entry's (decode.engines.NAME, sampling.engines.NAME)."""
        method = entry.get("speculative", "none")
        if method not in self.speculative:
            return [f"{key}.speculative: {method} is not {self.name}'s; it runs {', '.join(self.speculative)}"]
        if method == "draft_model" and not entry.get("draft") and not config.teacher.draft:
            return [f"{key}.draft: speculative draft_model needs a draft: set it, or teacher.draft"]
        return []

    def job(self, entry: dict) -> str:
        return self.name

    def run(self, name: str, entry: dict, out: str, precision: str, seed: int, config, **where) -> dict:
        """The run an entry becomes (what `execute` takes): `where` holds the study's paths the engine may
        need (results, teacher, draft)."""
        return {
            "name": name,
            "out": out,
            "dtype": precision,
            "speculative": entry.get("speculative", "none"),
            "k": entry.get("k", 4),
            "seed": seed,
        }

    def inputs(self, runs: list[dict], teacher: str | list, draft: tuple[str | None, list]) -> list:
        """The files a job of `runs` reads: by default the teacher's (its directory or its files), and
        `draft`'s (the study's draft: its path, its files) where a run drafts with it."""
        path, files = draft
        own = [teacher] if isinstance(teacher, str) else list(teacher)
        return own + (list(files) if drafts_with(runs, path) else [])

    def model_path(self, teacher: str) -> str:
        return ""

    def serves_gguf(self, entry: dict) -> bool:
        """Whether the entry's runs serve GGUF files (the rule gguf_export converts the teacher for them)."""
        return self.gguf

    def execute(self, program: str, model_path: str, prompts: str, runs: list[dict], threads: int) -> None:
        raise NotImplementedError(f"engine {self.name} runs nothing")
