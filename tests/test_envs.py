"""The conda environment of `--sdm conda` and the packaging agree with constraints.txt."""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
STUDY_PACKAGES = {
    "torch",
    "transformers",
    "datasets",
    "snakemake",
    "lm-eval",
    "statsmodels",
    "matplotlib",
    "pandas",
    "tokenizers",
    "safetensors",
}


def norm(name: str) -> str:
    """PEP 503 name: lm_eval, LM-Eval and lm.eval are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def name_of(req: str) -> str:
    return norm(re.split(r"[\[<>=!~;\s]", req.strip(), maxsplit=1)[0])


def constraints() -> dict:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[norm(name)] = version.strip()
    return pins


def env_pins() -> dict:
    env = yaml.safe_load((ROOT / "envs" / "orthrus.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    pins = {}
    for req in pip:
        if req.startswith("-"):
            continue
        assert "==" in req, f"envs/orthrus.yaml: {req!r} is not pinned"
        pins[name_of(req)] = req.split("==", 1)[1].strip()
    return pins


def test_env_pins_agree_with_constraints():
    pins, env = constraints(), env_pins()
    wrong = {name: (v, pins.get(name)) for name, v in env.items() if pins.get(name) != v}
    assert not wrong, f"envs/orthrus.yaml vs constraints.txt (env, constraints): {wrong}"


def test_env_lists_the_study_packages():
    assert STUDY_PACKAGES <= set(env_pins()), STUDY_PACKAGES - set(env_pins())


def test_env_python_matches_the_project():
    env = yaml.safe_load((ROOT / "envs" / "orthrus.yaml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert tuple(map(int, python.split("=")[1].split("."))) >= tuple(map(int, floor.lstrip(">=").split(".")))


def test_every_dependency_is_pinned_in_constraints():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [
        r for extra in project.get("optional-dependencies", {}).values() for r in extra
    ]
    pins = constraints()
    missing = sorted({name_of(r) for r in reqs} - set(pins))
    assert not missing, f"pyproject dependencies without a pin in constraints.txt: {missing}"
