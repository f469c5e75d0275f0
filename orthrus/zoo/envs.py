"""Each release in an environment of its own, built from the registry by pip and cached.

A release is installed into `<env_dir>/<package>-<version>` (a venv; torch at the project's own pin
where the engine needs it, so that only the release differs between a case's two runs). A built
environment carries `zoo-env.json` (what was asked, what pip installed) and is reused as it is. A
release that does not install is a result, not an error: the status says so with pip's last lines, the
case's row says "not installed", and the other cases go on. Nothing here is cached on failure, so a
rerun tries again (a registry that was down is not a verdict).

    orthrus zoo env CONFIG CASE SIDE STATUS.json
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from orthrus.zoo.cases import Case, Release

TORCH_PIN = "torch==2.13.0"  # the project's (constraints.txt): the one CPU build every environment shares
TORCH_ENGINES = {"transformers"}  # engines whose package runs on torch; vLLM's is a prebuilt environment
MARK = "zoo-env.json"
ROOT = Path(__file__).resolve().parents[2]


def requirements(case: Case, release: Release) -> list[str]:
    if release.install is not None:
        return list(release.install)
    return [f"{case.package}=={release.version}"] + ([TORCH_PIN] if case.engine in TORCH_ENGINES else [])


def env_name(case: Case, release: Release) -> str:
    """The cache key: the package and release, or the prebuilt interpreter's directory."""
    if release.version is not None:
        return f"{case.package}-{release.version}"
    return f"{case.package}-prebuilt-{Path(os.path.expandvars(release.python)).parent.parent.name.lstrip('.')}"


def resolve(path: str) -> Path:
    p = Path(os.path.expandvars(path))
    return p if p.is_absolute() else ROOT / p


def _tail(text: str, n: int = 5) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    return " | ".join(lines[-n:])


def install(case: Case, release: Release, env_dir: Path, log) -> dict:
    """Build (or reuse) the release's venv; its status."""
    target = env_dir / env_name(case, release)
    python = target / "bin" / "python"
    mark = target / MARK
    if mark.exists() and python.exists():  # its interpreter where it lies now (a cache can be moved)
        return json.loads(mark.read_text()) | {"python": str(python), "cached": True}
    if target.exists():  # a half-built environment from a killed run: start over
        shutil.rmtree(target)
    reqs = requirements(case, release)
    started = time.time()
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    env = os.environ | release.build_env
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-input", *reqs], env=env, capture_output=True, text=True
    )
    log.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        return {"ok": False, "reason": f"pip install {' '.join(reqs)} failed: {_tail(proc.stderr or proc.stdout)}"}
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True).stdout.split()
    status = {"ok": True, "python": str(python), "requirements": reqs, "freeze": freeze,
              "build_env": release.build_env, "seconds": round(time.time() - started, 1)}  # fmt: skip
    mark.write_text(json.dumps(status, indent=1) + "\n")
    return status


def prebuilt(release: Release, log) -> dict:
    python = resolve(release.python)
    if not python.exists() and release.build:
        proc = subprocess.run(release.build, shell=True, cwd=ROOT, capture_output=True, text=True)
        log.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            return {"ok": False, "reason": f"{release.build} failed: {_tail(proc.stderr or proc.stdout)}"}
    if not python.exists():
        return {"ok": False, "reason": f"the environment {python} does not exist (its build script makes it)"}
    return {"ok": True, "python": str(python), "prebuilt": True}


def ensure(case: Case, side: str, env_dir: Path, log) -> dict:
    release = getattr(case, side)
    status = prebuilt(release, log) if release.python else install(case, release, env_dir, log)
    return status | {"name": env_name(case, release), "side": side}
