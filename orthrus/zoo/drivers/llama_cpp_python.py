"""The zoo's driver for llama-cpp-python's Python API (the contract: orthrus/zoo/drivers/__init__.py).

    <release python> orthrus/zoo/drivers/llama_cpp_python.py SPEC.json OUT.jsonl

llama-cpp-python's speculative decoding lives in its Python code (Llama.generate verifies a draft
model's tokens in one batch), not in llama.cpp's server, so the release is driven through `Llama`
itself: one `Llama` per arm on SPEC's `model` (a GGUF file), each prompt's ids fed to
`Llama.generate` as create_completion feeds them (the KV cache reset first, so no arm reuses another
prompt's prefix), until `max_new_tokens` tokens or an end-of-generation token (recorded: it is an
emitted token, as transformers' generate records it).

An arm is one flat dict of the release's own keyword arguments, routed by the release's signatures:
    - a named parameter of `Llama()` (n_ctx, n_batch, seed, n_threads, flash_attn, ...) goes to Llama();
    - a parameter of `create_completion()` that `generate()` also takes (top_k, top_p, min_p,
      typical_p, repeat_penalty, frequency_penalty, presence_penalty, tfs_z, mirostat_*, and
      `temperature`, generate's `temp`) goes to generate; create_completion's own (max_tokens, stop,
      logprobs, logit_bias, ...) are refused: the driver owns the length and reads ids, not text;
    - `draft_model` is data, a one-key dict naming the draft class and its keyword arguments:
          {"prompt_lookup": {"num_pred_tokens": 5, "max_ngram_size": 2}}
      `prompt_lookup` is llama_cpp.llama_speculative.LlamaPromptLookupDecoding; any other key names a
      LlamaDraftModel subclass of that module by its class name (a later release's drafts, as data).
      null or absent: no draft.
    An unknown key is an error (Llama() swallows unknown keywords in **kwargs; the driver does not).
Unless an arm sets them: n_threads and n_threads_batch = SPEC's `threads`; seed = SPEC's `seed`
(sample s of prompt i reseeds with seed + i * samples + s); n_ctx = the longest prompt plus max_new_tokens, rounded up to 256;
verbose = False; and the reference arm with `logits: true` gets logits_all=True, its own top-2 read
from Llama.scores at each emitted position (a draft turns logits_all on by itself). Sampling
settings not given are the release's own defaults (generate's: temp 0.8, top_k 40, top_p 0.95,
min_p 0.05), so a greedy case says `temperature: 0`. SPEC's `draft` (a model file) is not used: the
release ships no model-based draft.

Beyond the contract's fields, each record has `forwards` (the model's forward passes for that
prompt, the prompt's own included), and a speculative record `drafted` (the tokens its draft
proposed): a fixed release passes with the draft firing, not because it never did.

The environment line records llama_cpp.__version__, llama.cpp's system info (the SIMD it was built
with), the SHA-256 of the shared libraries it loaded, the threads, the GGUF file type and the platform.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
import random
import sys
from pathlib import Path

ARMS = ("reference", "speculative")
DRAFT_ALIASES = {"prompt_lookup": "LlamaPromptLookupDecoding"}
COMPLETION_TO_GENERATE = {"temperature": "temp"}  # create_completion's name -> generate's
FILE_TYPES = {0: "f32", 1: "f16", 7: "q8_0", 32: "bf16"}  # llama_ftype, the ones the zoo writes


class SpecError(ValueError):
    """A SPEC the driver cannot run (a key no function takes, a malformed draft)."""


def named_parameters(func) -> set[str]:
    """The keyword names `func` declares (not *args/**kwargs, not self): what routing may send it."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n for n, p in inspect.signature(func).parameters.items() if p.kind in kinds and n != "self"}


def split_arm(arm: dict, llama_params: set[str], completion_params: set[str], generate_params: set[str]):
    """An arm's flat kwargs as (Llama() kwargs, generate() kwargs, draft spec or None)."""
    llama, generate, draft = {}, {}, None
    for key, value in arm.items():
        target = COMPLETION_TO_GENERATE.get(key, key)
        if key == "draft_model":
            draft = value
        elif key == "model_path":
            raise SpecError("model_path is SPEC's `model`, not an arm's")
        elif key in llama_params:
            llama[key] = value
        elif key in completion_params and target in generate_params:
            generate[target] = value
        elif key in completion_params:
            raise SpecError(f"create_completion's {key!r} is the driver's own (it feeds ids and counts tokens)")
        else:
            raise SpecError(f"{key!r}: neither Llama()'s nor create_completion()'s")
    return llama, generate, draft


def parse_draft(draft) -> tuple[str, dict] | None:
    """A draft spec as (class name in llama_cpp.llama_speculative, its kwargs); None for no draft."""
    if draft is None:
        return None
    if not isinstance(draft, dict) or len(draft) != 1:
        raise SpecError(f"draft_model {draft!r}: one key naming the draft, e.g. {{'prompt_lookup': {{...}}}}")
    (name, kwargs), = draft.items()  # fmt: skip
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise SpecError(f"draft_model {name!r}: its keyword arguments are a dict, not {kwargs!r}")
    return DRAFT_ALIASES.get(name, name), dict(kwargs)


def build_draft(parsed):
    """The release's draft object for a parsed spec (its class must be a LlamaDraftModel), in a
    subclass that only counts the tokens it proposes: a pass at the fixed release then shows the
    draft did propose (a draft that never fires would pass any release)."""
    if parsed is None:
        return None
    from llama_cpp import llama_speculative

    cls = getattr(llama_speculative, parsed[0], None)
    if not (inspect.isclass(cls) and issubclass(cls, llama_speculative.LlamaDraftModel)):
        raise SpecError(f"draft {parsed[0]!r}: no such LlamaDraftModel in this release")

    def counted_call(self, input_ids, /, **kwargs):
        drafted = cls.__call__(self, input_ids, **kwargs)
        self.proposed += len(drafted)
        return drafted

    counted = type(f"Counted{cls.__name__}", (cls,), {"__call__": counted_call, "proposed": 0})
    return counted(**parsed[1])


def default_n_ctx(prompts: list[dict], max_new_tokens: int) -> int:
    """The context every arm gets unless it sets one: the longest prompt and its new tokens, in 256s."""
    need = max(len(p["ids"]) for p in prompts) + max_new_tokens
    return -(-need // 256) * 256


def llama_kwargs(spec: dict, arm_name: str, llama: dict) -> dict:
    """Llama()'s kwargs for an arm: the driver's defaults under the arm's own."""
    kwargs = {
        "n_ctx": default_n_ctx(spec["prompts"], spec["max_new_tokens"]),
        "n_threads": spec["threads"],
        "n_threads_batch": spec["threads"],
        "seed": spec["seed"],
        "verbose": False,
    }
    if arm_name == "reference" and spec.get("logits"):
        kwargs["logits_all"] = True
    kwargs.update(llama)
    return kwargs


def top2(row) -> list[list]:
    """The two largest logits of one row as [[id, logit], [id, logit]], ties to the lower id."""
    import numpy as np

    order = np.lexsort((np.arange(row.shape[0]), -row.astype(np.float64)))[:2]
    return [[int(i), float(row[i])] for i in order]


def decode(llm, ids: list[int], max_new: int, generate: dict) -> list[int]:
    """One prompt's new tokens as create_completion produces them: generate from a reset cache, stop
    after `max_new` tokens or at an end-of-generation token (which is kept)."""
    import llama_cpp

    llm.reset()
    out: list[int] = []
    for token in llm.generate(ids, **generate):
        out.append(int(token))
        if len(out) >= max_new or llama_cpp.llama_token_is_eog(llm.model, token):
            break
    return out


def reference_top2(llm, n_prompt: int, tokens: list[int], greedy: bool) -> list:
    """The engine's own top-2 at each emitted position: row n_prompt - 1 + i of Llama.scores produced
    token i. Greedy, each emitted token must be its row's maximum (else the rows are misread)."""
    rows = []
    for i, token in enumerate(tokens):
        row_index = n_prompt - 1 + i
        if row_index >= llm.n_tokens:
            raise RuntimeError(f"logits row {row_index} not evaluated ({llm.n_tokens} tokens in the context)")
        row = llm.scores[row_index]
        pair = top2(row)
        if greedy and float(row[token]) < pair[0][1]:
            raise RuntimeError(f"greedy token {token} at new position {i} is not its logits row's maximum")
        rows.append(pair)
    return rows


def count_forwards(llm) -> list[int]:
    """Count the model's forward passes (Llama.eval calls, the prompt's included) through an instance
    attribute that calls the release's own eval: with the tokens, the speed-up the draft bought."""
    count = [0]
    release_eval = llm.eval

    def counted_eval(tokens):
        count[0] += 1
        return release_eval(tokens)

    llm.eval = counted_eval
    return count


def seed_all(seed: int) -> None:
    """Every RNG the process has (the release samples with its own seeded sampler)."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)


def run_arm(spec: dict, arm_name: str, routes: tuple, write) -> dict:
    """Every prompt and sample of one arm, each record handed to `write`; the environment it ran in."""
    from llama_cpp import Llama

    llama, generate, draft = split_arm(spec["arms"].get(arm_name) or {}, *routes)
    kwargs = llama_kwargs(spec, arm_name, llama)
    llm = Llama(model_path=spec["model"], draft_model=build_draft(parse_draft(draft)), **kwargs)
    forwards = count_forwards(llm)
    greedy = generate.get("temp", 0.8) == 0
    want_logits = arm_name == "reference" and bool(spec.get("logits"))
    n = spec.get("samples", 1)
    for i, prompt in enumerate(spec["prompts"]):
        for s in range(n):
            seed_all(spec["seed"] + i * n + s)  # the contract's seeding: no two draws share a seed
            llm.set_seed(kwargs["seed"] + i * n + s)
            before, forwards[0] = getattr(llm.draft_model, "proposed", 0), 0
            tokens = decode(llm, list(prompt["ids"]), spec["max_new_tokens"], generate)
            record = {
                "arm": arm_name,
                "prompt_id": prompt["id"],
                "sample": s,
                "tokens": tokens,
                "forwards": forwards[0],
            }
            if llm.draft_model is not None:
                record["drafted"] = llm.draft_model.proposed - before
            if want_logits:
                record["top2"] = reference_top2(llm, len(prompt["ids"]), tokens, greedy)
            write(record)
    env = environment(spec, llm)
    if hasattr(llm, "close"):
        llm.close()
    return env


def library_hashes() -> dict:
    """SHA-256 of the shared libraries the release loads: the build itself, byte for byte."""
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(lib.glob("*.so*"))}


def file_type(llm) -> str:
    """The GGUF's general.file_type as a name, from the metadata the release itself read."""
    value = int(llm.metadata.get("general.file_type", -1))
    return FILE_TYPES.get(value, f"ftype {value}")


def environment(spec: dict, llm) -> dict:
    """What decides the arithmetic: the release, its build, the threads, the file, the machine."""
    import llama_cpp
    import numpy as np

    info = llama_cpp.llama_print_system_info()
    return {
        # "llama.cpp" and the KV cache's type: the audit judges a divergence in the coarsest rounding the
        # record names (orthrus.audit.verdict.arithmetic_precision); the cache is f16 unless an arm says
        "engine": "llama.cpp",
        "binding": "llama_cpp_python",
        "kv_cache": "f16" if not any("type_k" in a for a in spec["arms"].values()) else "per arm",
        "weights": file_type(llm),
        "package": "llama-cpp-python",
        "version": llama_cpp.__version__,
        "system_info": info.decode(errors="replace").strip() if isinstance(info, bytes) else str(info),
        "libraries": library_hashes(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "threads": spec["threads"],
        "dtype": file_type(llm),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }


def routes() -> tuple[set[str], set[str], set[str]]:
    """The release's own signatures: Llama(), create_completion(), generate()."""
    from llama_cpp import Llama

    return named_parameters(Llama.__init__), named_parameters(Llama.create_completion), named_parameters(Llama.generate)


def run(spec: dict, out: Path) -> None:
    """Both arms into OUT.jsonl.tmp, renamed to OUT.jsonl once complete."""
    for arm in spec["arms"]:
        if arm not in ARMS:
            raise SpecError(f"arm {arm!r}: the arms are {', '.join(ARMS)}")
    signatures = routes()
    for arm in ARMS:  # refuse a bad arm before the first decode
        parse_draft(split_arm(spec["arms"].get(arm) or {}, *signatures)[2])
    records: list[dict] = []
    envs = [run_arm(spec, arm, signatures, records.append) for arm in ARMS]
    if envs[0] != envs[1]:
        raise RuntimeError(f"the arms ran in different environments: {envs}")
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w") as f:
        for line in [{"environment": envs[0]}, *records]:
            f.write(json.dumps(line) + "\n")
    os.replace(tmp, out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: llama_cpp_python.py SPEC.json OUT.jsonl", file=sys.stderr)
        return 2
    out = Path(argv[1])
    try:
        run(json.loads(Path(argv[0]).read_text()), out)
    except Exception as e:  # the contract: one line naming what failed, and no OUT.jsonl
        tmp = out.with_name(out.name + ".tmp")
        if tmp.exists():
            tmp.unlink()
        print(f"llama_cpp_python driver: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
