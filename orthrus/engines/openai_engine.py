"""Any server that speaks the OpenAI-compatible completions API, as an engine of the workflow
(orthrus/engines/engine.py), at one or more concurrencies. An entry (decode.engines or sampling.engines)
names its server in one of three ways:

    launch: llamacpp | vllm    the workflow starts llama.cpp's server or vLLM's OpenAI server itself
                               (orthrus/engines/openai_launch.py), with the entry's speculative method
    command: [PROGRAM, ARG...] the workflow starts this program ({host} {port} {model} {slots} filled in)
    url: http://HOST:PORT      a server the user already runs: nothing starts, the URL alone is enough

and is audited through orthrus/engines/openai_api.py at each of its `concurrency` values (requests in
flight at once), `repeats` times each. A decode entry NAME with concurrency [1, 4, 16] becomes the
decode.external entries NAME-c1, NAME-c4 and NAME-c16 (`expand`): NAME-c1 is compared with the
entry's own reference (another entry's -c1, or the in-process ar-ref), every other NAME-cC with
NAME-c1, the same server and model unloaded. One job per entry, its runs sharing a server where its
slots do not change with the load (llama.cpp gets `slots` = the concurrency unless the entry fixes
`slots`, so it restarts per concurrency; vLLM serves every concurrency from one start with
--max-num-seqs the largest). A sampled entry takes one concurrency.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from orthrus.engines.engine import Engine
from orthrus.engines.llamacpp_engine import LlamaCpp
from orthrus.engines.openai_launch import LAUNCHES
from orthrus.engines.vllm_engine import VLLM
from orthrus.errors import InputError

NAME = "openai"
SERVER_KEYS = ("launch", "command", "url")
# the settings of a launched server's command, which a server the workflow does not build cannot take
LAUNCH_ONLY = ("gguf", "kv_cache", "draft", "patches", "batch_invariant")
DEFAULT_REPEATS, DEFAULT_TIMEOUT_S = 3, 3600
_LLAMACPP, _VLLM = LlamaCpp(), VLLM()


def concurrency_name(name: str, c: int) -> str:
    return f"{name}-c{c}"


def concurrencies(entry: dict) -> list[int]:
    c = entry.get("concurrency", [1])
    return [c] if isinstance(c, int) else list(c)


def expand(entries: dict) -> dict:
    """decode.engines with each openai entry as one entry per concurrency (NAME-cC, `concurrency` one
    number, `base` NAME): NAME-cC with C > 1 referenced to NAME-c1, NAME-c1 to the entry's reference
    (its -c1 where that is an openai entry too)."""
    out = {}
    for name, e in entries.items():
        if (e or {}).get("engine") != NAME:
            out[name] = e
            continue
        for c in concurrencies(e):
            ref = e.get("reference")
            if ref is not None and (entries.get(ref) or {}).get("engine") == NAME:
                ref = concurrency_name(ref, 1)
            ref = concurrency_name(name, 1) if c != 1 else ref
            slots = e.get("slots") or (c if e.get("launch") == "llamacpp" else max(concurrencies(e)))
            out[concurrency_name(name, c)] = (
                {k: v for k, v in e.items() if k != "reference"}
                | {"concurrency": c, "base": name, "slots": slots}
                | ({"reference": ref} if ref else {})
            )
    return out


class OpenAI(Engine):
    name = NAME
    speculative = ("none", "ngram", "draft_model")

    def program(self, config: dict) -> str | None:
        return None  # a launched server's program is its launcher's key (engines.*); a URL needs none

    def _launched(self, entries: list[dict], launch: str) -> list[dict]:
        return [e for e in entries if e.get("launch") == launch]

    def problem(self, config: dict, users: list[str], entries: list[dict]) -> str | None:
        for launch, engine in (("llamacpp", _LLAMACPP), ("vllm", _VLLM)):
            mine = [u for u, e in zip(users, entries) if e.get("launch") == launch]
            if mine:
                problem = engine.problem(config, mine, self._launched(entries, launch))
                if problem:
                    return problem
        return None

    def entry_problems(self, key: str, entry: dict, config: dict) -> list[str]:
        given = [k for k in SERVER_KEYS if entry.get(k) is not None]
        if len(given) != 1:
            return [
                f"{key}: give exactly one of launch ({', '.join(LAUNCHES)}), command or url (got {given or 'none'})"
            ]
        out = []
        launch = entry.get("launch")
        if launch == "llamacpp":
            out += _LLAMACPP.entry_problems(key, entry, config)
        elif launch == "vllm":
            out += _VLLM.entry_problems(key, {k: v for k, v in entry.items() if k != "gguf"}, config)
            out += (
                [f"{key}.gguf: llamacpp's setting (vLLM serves the teacher's own files)"] if entry.get("gguf") else []
            )
        else:
            out += [
                f"{key}.{k}: a setting of a launched server (launch: llamacpp or vllm)"
                for k in LAUNCH_ONLY
                if entry.get(k)
            ]
        url = entry.get("url")
        if url is not None and (urlparse(url).scheme not in ("http", "https") or not urlparse(url).netloc):
            out.append(f"{key}.url: {url!r} is not an http(s)://HOST:PORT address")
        command = entry.get("command")
        if command is not None and not Path(str(command[0])).expanduser().exists() and "/" in str(command[0]):
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
        return f"openai-{entry['base']}" if entry.get("base") else NAME

    def run(self, name: str, entry: dict, out: str, precision: str, seed: int, config: dict, **where) -> dict:
        concurrency = concurrencies(entry)[0]
        run = super().run(name, entry, out, precision, seed, config) | {
            "concurrency": concurrency,
            "repeats": int(entry.get("repeats", DEFAULT_REPEATS)),
            "slots": int(entry.get("slots") or concurrency),
            "planted": bool(entry.get("planted", False)),
            "model": entry.get("model") or "",
            "extra_body": dict(entry.get("extra_body") or {}),
            "server_args": [str(a) for a in entry.get("server_args") or []],
            "timeout_s": int(entry.get("timeout_s", DEFAULT_TIMEOUT_S)),
        }
        launch = entry.get("launch")
        if launch == "llamacpp":
            lc = _LLAMACPP.run(name, entry, out, precision, seed, config, **where)
            server = {"binary": _LLAMACPP.program(config) or "", "model": lc["model"], "draft": lc.get("draft")}
            run["kv_cache"] = lc["kv_cache"]
        elif launch == "vllm":
            v = _VLLM.run(name, entry, out, precision, seed, config, **where)
            server = {"binary": _VLLM.program(config) or "", "model": "", "draft": v.get("draft")}
            server["kv_cache_gib"] = v["kv_cache_gib"]
        elif entry.get("command"):
            server = {"command": [str(a) for a in entry["command"]], "model_dir": ""}
        else:
            server = {"url": entry["url"]}
        run["server"] = {"kind": launch or ("command" if entry.get("command") else "url")} | server
        return run

    def inputs(self, runs: list[dict], teacher: str | list, draft: tuple[str | None, list]) -> list:
        """The GGUF files a llama.cpp server serves, the teacher's (and the draft's) files otherwise."""
        files = [
            f
            for r in runs
            if r["server"]["kind"] == "llamacpp"
            for f in (r["server"]["model"], r["server"].get("draft"))
            if f
        ]
        other = [r for r in runs if r["server"]["kind"] != "llamacpp"]
        return list(dict.fromkeys(files + (super().inputs(other, teacher, draft) if other else [])))

    def model_path(self, teacher: str) -> str:
        return teacher

    def serves_gguf(self, entry: dict) -> bool:
        return entry.get("launch") == "llamacpp"

    def execute(self, program: str, model_path: str, prompts: str, runs: list[dict], threads: int) -> None:
        from orthrus.engines import openai_run
        from orthrus.engines.server import ServerError

        for r in runs:  # the model directory the rule hands the job: what a launched server serves
            field = {"vllm": "model", "command": "model_dir"}.get(r["server"]["kind"])
            if field and not r["server"][field]:
                r["server"][field] = str(Path(model_path).resolve())
        try:
            openai_run.run_all(prompts, runs, threads)
        except ServerError as e:
            raise InputError(f"openai engine: {e}") from None
