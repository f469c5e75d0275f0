"""The bug zoo (orthrus/zoo, configs/zoo.yaml, docs/ZOO.md): cases as data, the judge, the plan, the
record, and the cheapest case end to end at both of its releases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from orthrus.errors import ConfigError
from orthrus.zoo import judge, record
from orthrus.zoo.cases import ENGINES, Case, read_zoo, zoo_config
from orthrus.zoo.envs import env_name, requirements

ROOT = Path(__file__).resolve().parents[1]
ZOO_YAML = ROOT / "configs" / "zoo.yaml"
CHEAPEST = "hf-assisted-sampled"


def case(**over) -> dict:
    base = {"issue": "x/y#1", "what": "w", "engine": "transformers", "package": "transformers",
            "affected": {"version": "4.44.2"}, "fixed": {"version": "4.45.0"}, "subject": "llama", "draft": True,
            "arms": {"reference": {}, "speculative": {"assistant_model": "draft"}}}  # fmt: skip
    return base | over


def test_every_committed_case_reads_and_has_a_driver():
    zoo = read_zoo([ZOO_YAML])
    assert CHEAPEST in zoo.cases
    for name, c in zoo.cases.items():
        assert (ROOT / "orthrus" / "zoo" / "drivers" / ENGINES[c.engine]).exists(), name
        # the two sides differ in their release, or in the fix the driver applies
        assert env_name(c, c.affected) != env_name(c, c.fixed) or c.fixed.patch, f"{name}: the sides are the same"


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"arms": {"reference": {}, "speculative": {}}, "engin": "x"}, "cases.c.engin"),
        ({"affected": {"version": "1", "python": "/x"}}, "cases.c.affected"),
        ({"sampling": {"temperature": 0}}, "cases.c.sampling.temperature"),
        ({"engine": "tensorrt"}, "cases.c.engine"),
        ({"arms": {"reference": {}}}, "cases.c"),
        ({"prompts": ["nope-0000"]}, "cases.c"),
        ({"fixed": {"python": "x", "patch": {"file": "p.py", "apply": []}}}, "cases.c.fixed.patch.apply"),
    ],
)
def test_a_wrong_case_is_refused_naming_its_key(bad, key):
    with pytest.raises(ConfigError) as e:
        zoo_config({"cases": {"c": case(**bad)}})
    assert f"zoo.{key}" in str(e.value)


def test_only_names_known_cases():
    with pytest.raises(ConfigError, match="only names unknown cases: nope"):
        zoo_config({"cases": {"c": case()}, "only": ["nope"]})


def test_a_release_installs_the_package_and_the_project_torch():
    c = Case.model_validate(case())
    assert requirements(c, c.affected) == ["transformers==4.44.2", "torch==2.13.0"]
    lcp = Case.model_validate(case(engine="llama_cpp_python", package="llama-cpp-python", subject="llama_gguf"))
    assert requirements(lcp, lcp.fixed) == ["llama-cpp-python==4.45.0"]


@pytest.mark.parametrize(
    "top2, token, want",
    [
        ([[5, 10.0], [7, 2.0]], 7, "structural"),  # 8 apart in fp32: millions of ulps
        ([[5, 10.0], [7, 10.0]], 7, "tie"),
        ([[5, 10.0], [7, 10.0 - 2 * 2.0**-20]], 7, "rounding"),  # 4 ulps at 10 (ulp 2^-20)
        ([[5, 10.0], [7, 10.0 - 2 * 2.0**-20]], 9, None),  # outside the top 2, within the bound: unknown
        ([[5, 10.0], [7, 9.0]], 5, None),  # the engine's own first: no divergence to judge
    ],
)
def test_a_divergence_is_judged_from_the_engines_own_margin(top2, token, want):
    assert judge.divergence_verdict(top2, token, "fp32")[0] == want


def greedy_records(spec_tokens):
    ref = {"arm": "reference", "prompt_id": "p", "sample": 0, "tokens": [5, 6, 7],
           "top2": [[[5, 9.0], [1, 1.0]], [[6, 9.0], [2, 8.0]], [[7, 9.0], [3, 1.0]]]}  # fmt: skip
    return [ref, {"arm": "speculative", "prompt_id": "p", "sample": 0, "tokens": spec_tokens}]


def test_greedy_catches_a_structural_divergence_and_passes_equal_trajectories():
    caught = judge.greedy(greedy_records([5, 2, 7]), {"engine": "transformers"})
    assert caught["caught"] and caught["structural"] == 1 and caught["divergent"] == 1
    same = judge.greedy(greedy_records([5, 6, 7]), {"engine": "transformers"})
    assert not same["caught"] and same["divergent"] == 0


def test_the_plan_reaches_the_power_it_prints_and_stops_at_the_ceiling(capsys):
    strong = judge.power_plan({"statistic": 40.0, "dof": 5}, 100, 0.9, 0.01, 2000)
    assert strong["power"] >= 0.9 and strong["samples"] == 100
    weak = judge.power_plan({"statistic": 8.0, "dof": 5}, 100, 0.9, 0.01, 2000)
    assert weak["samples"] > 100 and weak["power"] >= 0.9
    assert judge.power_at({"statistic": 8.0, "dof": 5}, 100, weak["samples"] - 50, 0.01) < 0.9
    none = judge.power_plan({"statistic": 3.0, "dof": 5}, 100, 0.9, 0.01, 500)
    assert none["samples"] == 500 and none["power"] < 0.9
    assert "plan: " in capsys.readouterr().out  # printed before anything samples


def test_a_miss_under_a_short_plan_is_underpowered_and_a_rejected_control_invalid(monkeypatch):
    c = Case.model_validate(case(sampling={"temperature": 0.7, "top_k": 5}))
    miss = {"statistic": 4.0, "dof": 5, "p_value": 0.5, "n": 100}
    monkeypatch.setattr(judge, "sampled", lambda *a: {"speculative": miss, "reference": miss})
    assert judge.verdict(c, {}, [], {}, {"power": 0.4})["verdict"] == "underpowered"
    assert judge.verdict(c, {}, [], {}, {"power": 0.95})["verdict"] == "passed"
    bad = dict(miss, p_value=1e-9)
    monkeypatch.setattr(judge, "sampled", lambda *a: {"speculative": bad, "reference": bad})
    assert judge.verdict(c, {}, [], {}, {"power": 0.95})["verdict"] == "invalid"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from orthrus.zoo.subjects import build

    return build("llama", tmp_path_factory.mktemp("llama"))


def test_the_llama_twin_is_the_shipped_model_without_qk_norms(llama):
    from safetensors import safe_open

    cfg = json.loads((Path(llama["teacher"]) / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["rope_theta"] == 10000.0
    with safe_open(Path(llama["teacher"]) / "model.safetensors", "pt") as f:
        keys = list(f.keys())
    assert keys and not any("q_norm" in k or "k_norm" in k for k in keys)


def test_the_sampled_test_passes_exact_samples_and_catches_biased_ones(llama):
    """Samples drawn from the target's own probabilities pass; the same count with the first token
    forced to its runner-up a third of the time is caught."""
    import torch

    from orthrus.decode.loop import Sampler
    from orthrus.zoo.subjects import prompt_ids

    c = Case.model_validate(case(sampling={"temperature": 0.7, "top_k": 5}, prompts=3, positions=1))
    model = judge.target(llama)
    p = prompt_ids(3)[2]  # the creative prompt: a first token with a runner-up of about a quarter
    with torch.no_grad():
        logits = model(torch.tensor([p["ids"]])).logits[0, -1]
    probs = Sampler(temperature=0.7, top_k=5).probs(logits).double().numpy()
    rng = np.random.default_rng(0)
    honest = rng.choice(len(probs), size=300, p=probs / probs.sum())
    second = int(np.argsort(-probs)[1])
    biased = np.where(rng.random(300) < 1 / 3, second, honest)

    def records(tokens):
        return [
            {"arm": "speculative", "prompt_id": p["id"], "sample": i, "tokens": [int(t)]} for i, t in enumerate(tokens)
        ]

    assert judge.sampled(c, llama, records(honest))["speculative"]["p_value"] > 0.01
    assert judge.sampled(c, llama, records(biased))["speculative"]["p_value"] < 1e-6


def test_the_transformers_driver_runs_a_spec_in_this_environment(llama, tmp_path):
    """The driver under this environment's transformers (whose assisted decoding is exact): both arms
    written, the reference's own top-2 beside each token, the speculative greedy arm equal to it."""
    from orthrus.zoo.run import drive
    from orthrus.zoo.subjects import prompt_ids

    c = Case.model_validate(case())
    job = {"model": llama["teacher"], "draft": llama["draft"], "prompts": prompt_ids(2), "arms": c.arms,
           "max_new_tokens": 6, "sampling": None, "samples": 1, "seed": 0, "threads": 1, "logits": True}  # fmt: skip
    out = tmp_path / "out.jsonl"
    assert drive(c, sys.executable, job, out, tmp_path / "log") is None
    env, records = judge.read(out)
    assert env["engine"] == "transformers" and env["dtype"] == "float32"
    assert {r["arm"] for r in records} == {"reference", "speculative"} and len(records) == 4
    assert all(len(r["top2"]) == len(r["tokens"]) for r in records if r["arm"] == "reference")
    assert not judge.greedy(records, env)["divergent"]
    assert not list(tmp_path.glob("*.tmp"))


def test_a_failing_driver_leaves_no_record(llama, tmp_path):
    from orthrus.zoo.run import drive

    c = Case.model_validate(case())
    job = {"model": str(tmp_path / "missing"), "draft": None, "prompts": [], "arms": c.arms, "max_new_tokens": 1,
           "sampling": None, "samples": 1, "seed": 0, "threads": 1}  # fmt: skip
    why = drive(c, sys.executable, job, tmp_path / "out.jsonl", tmp_path / "log")
    assert why and why.startswith("zoo driver (transformers):") and "\n" not in why
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "out.jsonl.tmp").exists()


def test_the_record_keeps_every_row_and_says_which_are_as_expected():
    c = Case.model_validate(case(sampling={"temperature": 0.7, "top_k": 5}))
    rows = [
        record.row_of("a", c, {"side": "affected", "version": "4.44.2", "verdict": "caught", "p_value": 1e-9}),
        record.row_of(
            "a", c, {"side": "fixed", "version": "4.45.0", "verdict": "not installed", "reason": "pip failed"}
        ),
    ]
    df = record.table(rows)
    assert list(df["as_expected"]) == [True, False] and len(df) == 2
    md = record.markdown(df)
    assert "pip failed" in md and "1 of 2 rows as expected" in md


def test_the_readme_findings_are_the_committed_record_rendered():
    committed = ROOT / "docs" / "zoo" / "zoo.csv"
    df = pd.read_csv(committed)
    assert record.render(ROOT / "README.md", df, check=True), "README's zoo block: run orthrus zoo render"
    assert set(df["side"]) == {"affected", "fixed"}


@pytest.mark.slow
def test_the_cheapest_case_is_caught_at_its_affected_release_and_passes_at_its_fix(tmp_path):
    """`snakemake --configfile` with the committed case, both releases built from the registry (cached
    in the repository's .zoo-envs between runs)."""
    cfg = yaml.safe_load(ZOO_YAML.read_text())
    cfg["zoo"]["only"] = [CHEAPEST]
    cfg["zoo"]["env_dir"] = str(ROOT / ".zoo-envs")
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump(cfg))
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(tmp_path / "zoo.yaml"), "--cores", "2"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    df = pd.read_csv(tmp_path / "results" / "zoo" / "record" / "zoo.csv")
    got = dict(zip(df["side"], df["verdict"]))
    assert got == {"affected": "caught", "fixed": "passed"}, df.to_dict("records")
    assert "plan: " in (tmp_path / "results" / "zoo" / CHEAPEST / "plan.json").read_text()


def test_a_driver_past_its_time_is_killed_with_everything_it_spawned(tmp_path, monkeypatch):
    """A driver that hangs (and leaves a child of its own): the run says why in one line, and neither
    process is alive afterwards."""
    from orthrus.zoo import run

    drivers = tmp_path / "drivers"
    drivers.mkdir()
    pidfile = tmp_path / "child.pid"
    (drivers / ENGINES["transformers"]).write_text(
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(run, "DRIVERS", drivers)
    c = Case.model_validate(case(timeout_s=10))
    job = {"threads": 1}
    why = run.drive(c, sys.executable, job, tmp_path / "out.jsonl", tmp_path / "log")
    assert why == "the driver ran past the case's timeout_s (10 s)"
    stat = Path(f"/proc/{int(pidfile.read_text())}/stat")
    time.sleep(0.5)  # the orphan is reaped by init
    assert not stat.exists() or stat.read_text().split(")")[1].split()[0] in ("Z", "X"), "the driver's child lives on"


def test_no_two_prompts_share_a_seed(llama, tmp_path):
    """The same prompt twice under two ids: with a seed per prompt and sample their samples differ, so
    the per-prompt tests the judge adds up are independent."""
    from orthrus.zoo.run import drive
    from orthrus.zoo.subjects import prompt_ids

    c = Case.model_validate(case(arms={"reference": {}, "speculative": {}}))
    ids = prompt_ids(3)[2]["ids"]
    job = {"model": llama["teacher"], "draft": None, "prompts": [{"id": "a", "ids": ids}, {"id": "b", "ids": ids}],
           "arms": c.arms, "max_new_tokens": 3, "sampling": {"temperature": 1.5, "top_k": None, "top_p": None},
           "samples": 8, "seed": 0, "threads": 1, "logits": False}  # fmt: skip
    assert drive(c, sys.executable, job, tmp_path / "out.jsonl", tmp_path / "log") is None
    by = judge.arms(judge.read(tmp_path / "out.jsonl")[1])["reference"]
    assert [r["tokens"] for r in by["a"]] != [r["tokens"] for r in by["b"]]


def test_a_release_that_does_not_install_is_a_row_with_its_reason(tmp_path, llama):
    """pip refuses the release: the status says why with pip's own words, nothing is left in the cache,
    and the side's row says `not installed` without running anything."""
    import io

    from orthrus.zoo.envs import ensure
    from orthrus.zoo.run import side

    c = Case.model_validate(case(affected={"version": "0.0.0", "install": ["orthrus-zoo-no-such-package==0.0.0"]}))
    status = ensure(c, "affected", tmp_path / "envs", io.StringIO())
    assert not status["ok"] and "orthrus-zoo-no-such-package" in status["reason"]
    assert not (tmp_path / "envs" / "transformers-0.0.0").exists()
    zoo = zoo_config({"cases": {"c": case()}})
    row = side(c, zoo, "affected", llama, status, {"samples": 1}, tmp_path)
    assert row["verdict"] == "not installed" and "orthrus-zoo-no-such-package" in row["reason"]


def test_a_log_probability_margin_is_measured_at_a_logits_magnitude():
    """Two log-probabilities 3e-6 apart near 0 are millions of fp32 ulps there, a few at a logit's
    magnitude: the server's margin is a rounding, not a bug."""
    top2 = [[5, -0.01], [7, -0.01 - 3e-6]]
    assert judge.divergence_verdict(top2, 7, "fp32")[0] == "structural"
    assert judge.divergence_verdict(top2, 7, "fp32", judge.LOGPROB_SCALE)[0] == "rounding"


def test_a_hand_edited_zoo_number_fails_the_check_and_rendering_restores_it(tmp_path):
    df = pd.read_csv(ROOT / "docs" / "zoo" / "zoo.csv")
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    begin = text.index(record.BLOCK[0])
    row = text[begin:].splitlines()[3]  # the first case's first row
    assert "**caught**" in row
    readme.write_text(text.replace(row, row.replace("**caught**", "**passed**")))
    assert not record.render(readme, df, check=True)
    record.render(readme, df)
    assert readme.read_text() == text
