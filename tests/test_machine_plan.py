"""The machine axis in the study (machine.*, orthrus/plan/machine_plan.py, workflow/rules/machine.smk):
which environments a config asks for on which CPU, what each one decodes again and with which command,
the kinds checked against the CPU before any job, and the comparison among the study's claims' inputs.
The CPU is monkeypatched: what a config says must not depend on the machine the tests run on."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from orthrus import machine
from orthrus.errors import ConfigError
from orthrus.plan import Study
from orthrus.plan.study_config import load

ROOT = Path(__file__).resolve().parents[1]
AVX2_CPU = set(machine.KINDS["avx2"].flags)
AVX512_CPU = set(machine.KINDS["avx512"].flags)


@pytest.fixture
def cpu(monkeypatch):
    """Make this machine the CPU a test names: its architecture and its /proc/cpuinfo flags."""

    def make(flags: set[str] | None, arch: str = "x86_64"):
        monkeypatch.setattr("platform.machine", lambda: arch)
        monkeypatch.setattr(machine, "cpu_flags", lambda *a: flags)

    make(AVX512_CPU)
    return make


def study(machine_section: dict | None = None, **top) -> Study:
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    if machine_section is not None:
        cfg["machine"] = machine_section
    cfg.update(top)
    return Study(load(values=cfg))


def w(**kw):
    return SimpleNamespace(**kw)


def test_the_default_decodes_its_bf16_orthrus_cells_again_under_avx2(cpu):
    m = study().machine
    assert m.envs == {"native-t1": ("native", 1), "avx2-t1": ("avx2", 1)} and m.skipped == []
    # the reference first, in the cells' (precision, attention); each Orthrus model's loop; nothing in fp32
    assert m.cells() == [
        ("teacher", "ar-ref", "bf16", "sdpa"),
        ("ce-k8", "orthrus", "bf16", "sdpa"),
        ("kl-k8", "orthrus", "bf16", "sdpa"),
    ]
    assert m.files("avx2-t1")[1] == "results/machine/avx2-t1/decode/ce-k8/orthrus-bf16-sdpa.parquet"
    # the study's own jobs run under the first kind; an extra environment's under its own, at its threads
    assert m.launcher() == "orthrus --cpu-kind native"
    cell = w(env="avx2-t1", model="ce-k8", decoder="orthrus", precision="bf16", attention="sdpa")
    assert (m.kind_of(cell), m.threads_of(cell)) == ("avx2", 1)
    assert m.cell_prompts(cell) == [] and m.reference_input(cell) == []
    args = m.compare_args()
    assert args[:6] == [
        "--run",
        "native:1=results/machine/native-t1/tables",
        "--claims",
        "native:1=results/machine/native-t1/claims.csv",
        "--probe",
        "native:1=results/machine/native-t1/probe.json",
    ]
    assert "avx2:1=results/machine/avx2-t1/tables" in args and args[-1] == "--common"
    # every environment analysed alike from the same cells: an extra one from its own decodings,
    # perplexity and forensics (under its kind), the study's own from its files of those cells
    extra, own = m.analyze_input(w(env="avx2-t1")), m.analyze_input(w(env="native-t1"))
    assert extra["decode"] == m.files("avx2-t1") and extra["ppl"] == ["results/machine/avx2-t1/ppl.parquet"]
    assert extra["forensics"] == ["results/machine/avx2-t1/forensics.parquet"]
    assert own == {
        "decode": [f"results/decode/{mo}/{d}-bf16-sdpa.parquet" for mo, d, _, _ in m.cells()],
        "ppl": ["results/ppl/reference.parquet"],
        "forensics": ["results/forensics.parquet"],
    }
    assert m.ppl_decoded(w(env="avx2-t1")) == ["results/machine/avx2-t1/decode/teacher/ar-ref-bf16-sdpa.parquet"]
    assert m.forensics_models() == ["ce-k8", "kl-k8"]
    assert m.forensics_decoded(w(env="avx2-t1", model="kl-k8")) == [m.files("avx2-t1")[2]]
    assert m.forensics_reference(w(env="avx2-t1", model="kl-k8")) == [m.files("avx2-t1")[0]]
    # the study's claims read the comparison, and `snakemake` builds it
    assert m.comparison() == [
        "results/tables/verdicts_by_env.csv",
        "results/tables/match_by_env.csv",
        "results/tables/machine_probes.csv",
    ]
    out = study().report.final_outputs([])
    assert set(m.comparison()) <= set(out) and "results/figures/match_by_env.png" in out


def test_every_kind_at_every_thread_count_the_study_own_first(cpu):
    cpu(set(machine.KINDS["avx512_bf16"].flags))  # native runs avx512_bf16's paths: avx512 caps it
    m = study({"kinds": ["avx2", "native", "avx512"], "threads": [1, 2]}).machine
    assert list(m.envs) == ["avx2-t1", "avx2-t2", "native-t1", "native-t2", "avx512-t1", "avx512-t2"]
    assert m.launcher() == "orthrus --cpu-kind avx2"
    # the whole grid by default, the oracle against its environment's own reference
    cells = m.cells()
    assert ("teacher", "oracle", "bf16", "sdpa") in cells and ("ce-k8", "orthrus", "fp32", "sdpa") in cells
    oracle = w(env="native-t2", model="teacher", decoder="oracle", precision="bf16", attention="sdpa")
    assert m.reference_input(oracle) == ["results/machine/native-t2/decode/teacher/ar-ref-bf16-sdpa.parquet"]
    assert m.threads_of(oracle) == 2
    # as many prompts as the study's cell; the reference as many as the environment's cells need
    assert m.cell_prompts(w(**{**vars(oracle), "decoder": "prompt-lookup"})) == ["--prompts-per-domain", 6]
    ref = w(env="avx2-t2", model="teacher", decoder="ar-ref", precision="fp32", attention="sdpa")
    assert m.cell_prompts(ref) == ["--prompts-per-domain", 4]
    narrowed = study({"kinds": ["native", "avx2"], "cells": {"decoders": ["prompt-lookup"]}}).machine
    assert narrowed.cell_prompts(ref) == ["--prompts-per-domain", 2]


def test_a_kind_the_cpu_lacks_is_refused_when_the_config_is_checked_naming_it_and_the_flags(cpu):
    cpu(AVX2_CPU)
    with pytest.raises(ConfigError) as err:
        study({"kinds": ["native", "avx512"]})
    (line,) = err.value.problems
    assert line.startswith("machine.kinds[1]: cpu kind 'avx512' needs CPU flag(s) avx512f, avx512cd")
    assert "which this CPU" in line
    # skipped instead, where the config says so, each with its reason; the study's own kind never is
    m = study({"kinds": ["avx2", "avx512", "native"], "unavailable": "skip"}).machine
    assert list(m.envs) == ["avx2-t1"] and m.skipped[0].startswith("machine: avx512 skipped: cpu kind")
    with pytest.raises(ConfigError, match=r"machine\.kinds\[0\]: cpu kind 'avx512'"):
        study({"kinds": ["avx512", "native"], "unavailable": "skip"})
    # an x86 CPU without AVX2 refuses the default's second kind by name
    cpu({"avx", "fma"})
    with pytest.raises(ConfigError, match=r"machine\.kinds\[1\]: cpu kind 'avx2' needs CPU flag\(s\) avx2, f16c"):
        study()


def test_a_machine_that_runs_no_kind_but_native_runs_the_default_alone(cpu):
    cpu(None, arch="aarch64")
    m = study().machine
    assert (
        list(m.envs) == ["native-t1"]
        and m.comparison() == []
        and "verdicts_by_env.csv" not in str(study().report.final_outputs([]))
    )
    assert m.skipped == ["machine: avx2 skipped: cpu kind 'avx2' caps x86 instruction sets; this machine is aarch64"]
    cpu(None)  # an x86 machine whose flags cannot be read
    assert list(study().machine.envs) == ["native-t1"]
    with pytest.raises(ConfigError, match=r"machine\.kinds\[0\]: cpu kind 'avx2' caps x86"):
        cpu(None, arch="aarch64")
        study({"kinds": ["avx2"]})


def test_one_environment_where_nothing_would_decode_again_and_threads_start_with_the_studys(cpu):
    m = study({"kinds": ["native", "avx2"], "cells": {"decoders": ["assisted"], "precisions": ["fp16"]}}).machine
    assert list(m.envs) == ["native-t1"] and "no decoder of machine.cells" in m.skipped[0]
    assert study({"kinds": ["native"]}).machine.extra == []
    with pytest.raises(ConfigError, match=r"machine\.threads: its first \(2\) is the study's own environment"):
        study({"threads": [2, 1]})
    assert list(study({"threads": [2, 1]}, threads=2).machine.envs) == ["native-t2", "native-t1"]


def test_a_kind_that_runs_what_another_already_runs_is_skipped_saying_so(cpu):
    """On an AVX2-only CPU avx2 is what native runs: the default's second environment would repeat the
    first at its price, so it is skipped, named, and the study has one environment."""
    cpu(AVX2_CPU)
    m = study().machine
    assert list(m.envs) == ["native-t1"] and m.comparison() == []
    assert m.skipped == ["machine: avx2 skipped: it runs the same code paths as native on this CPU"]
    # where the CPU has more, the two differ and both run
    cpu(AVX512_CPU)
    assert list(study().machine.envs) == ["native-t1", "avx2-t1"]
    assert machine.effective("native", AVX512_CPU) == "avx512" and machine.effective("avx2", AVX512_CPU) == "avx2"
