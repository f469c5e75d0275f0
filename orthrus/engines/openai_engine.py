"""Any server that speaks the OpenAI-compatible completions API, as an engine of the workflow
(orthrus/engines/engine.py), at one or more concurrencies. An entry (decode.engines or sampling.engines)
names its server in one of three ways:

    launch: llamacpp | vllm    the workflow starts llama.cpp's server or vLLM's OpenAI server itself
                               (orthrus/engines/openai_launch.py), with the entry's speculative method
    command: [PROGRAM, ARG...] the workflow starts this program ({host} {port} {model} {slots} filled in)
    url: http://HOST:PORT      a server the user already runs: nothing starts, the URL alone is enough

and is audited through orthrus/engines/openai_api.py (llama.cpp's server, launched or found by what its
/v1/models says, through its own /completion; any other through /v1/completions; the entry's `api`
names either) at each of its `concurrency` values (requests in flight at once), `repeats` times each. A decode entry NAME with concurrency [1, 4, 16] becomes the
decode.external entries NAME-c1, NAME-c4 and NAME-c16 (`expand`): NAME-c1 is compared with the
entry's own reference (another entry's -c1, or the in-process ar-ref), every other NAME-cC with
NAME-c1, the same server and model unloaded. One job per entry, its runs sharing a server where its
slots do not change with the load (llama.cpp gets `slots` = the concurrency unless the entry fixes
`slots`, so it restarts per concurrency; vLLM serves every concurrency from one start with
--max-num-seqs the largest). A sampled entry takes one concurrency.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

from orthrus.engines.engine import Engine
from orthrus.engines.launchers import LAUNCHERS
from orthrus.engines.openai_api import NATIVE_API
from orthrus.errors import InputError

SERVER_KEYS = ("launch", "command", "url")
# the settings of a launched server's command, which a server the workflow does not build cannot take
LAUNCH_ONLY = ("gguf", "kv_cache", "draft", "patches", "batch_invariant")
DEFAULT_REPEATS, DEFAULT_TIMEOUT_S = 3, 3600


def launchers() -> dict:
    """The engine rows whose OpenAI-compatible server an entry's `launch` may start, by name."""
    return LAUNCHERS


def concurrency_name(name: str, c: int) -> str:
    return f"{name}-c{c}"


def concurrencies(entry: dict) -> list[int]:
    c = entry.get("concurrency", [1])
    return [c] if isinstance(c, int) else list(c)


def _is_mine(entry: dict | None) -> bool:
    return (entry or {}).get("engine") == OpenAI.name


def default_slots(entry: dict, c: int) -> int:
    """A launched server's slots: the load where its engine fixes them at start (a start per
    concurrency), else the largest load (one start); the entry's `slots` where given."""
    if entry.get("slots"):
        return int(entry["slots"])
    row = launchers().get(entry.get("launch"))
    return c if row is not None and row.slots_follow_load else max(concurrencies(entry))


def expand(entries: dict) -> dict:
    """decode.engines with each openai entry as one entry per concurrency (NAME-cC, `concurrency` one
    number, `base` NAME): NAME-cC with C > 1 referenced to NAME-c1, NAME-c1 to the entry's reference
    (its -c1 where that is an openai entry too)."""
    out = {}
    for name, e in entries.items():
        if not _is_mine(e):
            out[name] = e
            continue
        for c in concurrencies(e):
            ref = e.get("reference")
            if ref is not None and _is_mine(entries.get(ref)):
                ref = concurrency_name(ref, 1)
            ref = concurrency_name(name, 1) if c != 1 else ref
            out[concurrency_name(name, c)] = (
                {k: v for k, v in e.items() if k != "reference"}
                | {"concurrency": c, "base": name, "slots": default_slots(e, c)}
                | ({"reference": ref} if ref else {})
            )
    return out


def vocabulary(model_path: str, prompts: str) -> int | None:
    """The ids an answer may hold (issue 62: an id outside them is refused before anything is
    written): what ingest checks a greedy file against, the study tokenizer's length, and for a
    sampled file what engine-samples does, the larger of it and the model's vocab_size. None where the
    job has no model directory."""
    if not model_path:
        return None
    from transformers import AutoConfig, AutoTokenizer

    try:
        n = len(AutoTokenizer.from_pretrained(model_path))
        with open(prompts, encoding="utf-8") as f:
            sampled = "n_samples" in json.loads(f.readline() or "{}")
        return max(n, AutoConfig.from_pretrained(model_path).vocab_size) if sampled else n
    except (OSError, ValueError) as e:
        raise InputError(
            f"openai engine: {model_path}: no vocabulary to check the answers' ids against ({e})"
        ) from None


class OpenAI(Engine):
    name = "openai"
    speculative = ("none", "ngram", "draft_model")

    def program(self, config) -> str | None:
        return None  # a launched server's program is its engine row's (engines.*); a URL needs none

    def problem(self, config, users: list[str], entries: list[dict]) -> str | None:
        for launch, row in launchers().items():
            mine = [(u, e) for u, e in zip(users, entries) if e.get("launch") == launch]
            problem = row.problem(config, [u for u, _ in mine], [e for _, e in mine]) if mine else None
            if problem:
                return problem
        return None

    def entry_problems(self, key: str, entry: dict, config) -> list[str]:
        given = [k for k in SERVER_KEYS if entry.get(k) is not None]
        if len(given) != 1:
            return [
                f"{key}: give exactly one of launch ({', '.join(launchers())}), command or url (got {given or 'none'})"
            ]
        out = []
        row = launchers().get(entry.get("launch"))
        if row is not None:
            out += row.entry_problems(key, entry, config)
        else:
            out += [
                f"{key}.{k}: a setting of a launched server (launch: {' or '.join(launchers())})"
                for k in LAUNCH_ONLY
                if entry.get(k)
            ]
        if entry.get("api") == NATIVE_API and row is not None and not row.native_completion:
            out.append(
                f"{key}.api: {NATIVE_API} is llama.cpp's own API, which launch: {entry['launch']} does not serve"
            )
        url = entry.get("url")
        if url is not None and (urlparse(url).scheme not in ("http", "https") or not urlparse(url).netloc):
            out.append(f"{key}.url: {url!r} is not an http(s)://HOST:PORT address")
        command = entry.get("command")
        if command is not None and "/" in str(command[0]) and not Path(str(command[0])).expanduser().exists():
            out.append(f"{key}.command: {command[0]!r} does not exist")
        found = concurrencies(entry)
        if key.startswith("sampling.") and len(found) != 1:
            out.append(f"{key}.concurrency: one number for a sampled entry (its reference is another entry)")
        elif not key.startswith("sampling.") and 1 not in found:
            out.append(f"{key}.concurrency: {found} lacks 1, the run every other concurrency is compared with")
        if len(set(found)) != len(found):
            out.append(f"{key}.concurrency: {found} repeats a value")
        return out

    def job(self, entry: dict) -> str:
        return f"{self.name}-{entry['base']}" if entry.get("base") else self.name

    def run(self, name: str, entry: dict, out: str, precision: str, seed: int, config, **where) -> dict:
        concurrency = concurrencies(entry)[0]
        run = super().run(name, entry, out, precision, seed, config) | {
            "concurrency": concurrency,
            "repeats": int(entry.get("repeats", DEFAULT_REPEATS)),
            "slots": int(entry.get("slots") or default_slots(entry, concurrency)),
            "planted": bool(entry.get("planted", False)),
            "model": entry.get("model") or "",
            "api": entry.get("api") or "",  # left out: the launch's, else what the server says (openai_run.check)
            "extra_body": dict(entry.get("extra_body") or {}),
            "server_args": [str(a) for a in entry.get("server_args") or []],
            "timeout_s": int(entry.get("timeout_s", DEFAULT_TIMEOUT_S)),
        }
        row = launchers().get(entry.get("launch"))
        if row is not None:  # the engine row's own run of the entry: its files, draft, cache
            inner = row.run(name, entry, out, precision, seed, config, **where)
            run["server"] = {"kind": "launch", "launch": entry["launch"], "inner": inner}
            run["server"] |= {"program": row.program(config) or "", "model_dir": ""}
        elif entry.get("command"):
            run["server"] = {"kind": "command", "command": [str(a) for a in entry["command"]], "model_dir": ""}
        else:
            run["server"] = {"kind": "url", "url": entry["url"]}
        return run

    def inputs(self, runs: list[dict], teacher: str | list, draft: tuple[str | None, list]) -> list:
        """What each run's engine row reads (llama.cpp: the GGUF files), the teacher's files otherwise."""
        rows = launchers()
        found = []
        for r in runs:
            launch = r["server"].get("launch")
            if launch in rows:
                found += rows[launch].inputs([r["server"]["inner"]], teacher, draft)
            else:
                found += super().inputs([r], teacher, draft)
        return list(dict.fromkeys(found))

    def model_path(self, teacher: str) -> str:
        return teacher

    def serves_gguf(self, entry: dict) -> bool:
        row = launchers().get(entry.get("launch"))
        return row is not None and row.serves_gguf(entry)

    def execute(self, program: str, model_path: str, prompts: str, runs: list[dict], threads: int) -> None:
        from orthrus.engines import openai_run
        from orthrus.engines.server import ServerError

        vocab = vocabulary(model_path, prompts)
        for r in runs:  # the model directory the rule hands the job: what vLLM or a command serves
            if "model_dir" in r["server"] and not r["server"]["model_dir"]:
                r["server"]["model_dir"] = str(Path(model_path).resolve())
            r.setdefault("vocab", vocab)
        try:
            openai_run.run_all(prompts, runs, threads)
        except ServerError as e:
            raise InputError(f"openai engine: {e}") from None
