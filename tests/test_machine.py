"""The CPU kind as a setting of the numerical environment (orthrus/machine.py, `orthrus --cpu-kind`),
its record beside every decoding row, and the comparison of verdicts across environments with its
planted control (orthrus/report/claims/machine.py, `orthrus compare-envs`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import save_tiny, tiny_base

from orthrus import machine
from orthrus.cli import main as cli
from orthrus.contracts import CLAIMS_COLUMNS
from orthrus.errors import InputError
from orthrus.report import claims
from orthrus.report.claims import machine as mc
from orthrus.report.compare_envs import main as compare_envs

ROOT = Path(__file__).resolve().parent.parent
AVX512_BF16_CPU = set(machine.KINDS["avx512_bf16"].flags)


def test_each_kind_caps_every_library_and_native_takes_every_cap_away():
    assert machine.switches("avx2") == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    }
    assert machine.switches("avx512_bf16")["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE_BF16"
    assert machine.switches("amx")["MKL_ENABLE_INSTRUCTIONS"] == "AVX512_E4"
    env = {"ONEDNN_MAX_CPU_ISA": "AVX2", "PATH": "/bin"}
    machine.apply_kind("native", env)
    assert env == {"PATH": "/bin", machine.KIND_VAR: "native"}  # an inherited cap cannot run as native
    machine.apply_kind("avx2", env, flags=set(machine.KINDS["avx2"].flags))
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env[machine.KIND_VAR] == "avx2"
    with pytest.raises(InputError, match="unknown cpu kind 'avx3'"):
        machine.switches("avx3")


def test_a_kind_above_the_cpu_is_refused_naming_the_flags_it_lacks(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx avx2 fma\n\nprocessor\t: 1\n")
    assert machine.cpu_flags(cpuinfo) == {"fpu", "avx", "avx2", "fma"} and machine.cpu_model(cpuinfo) == "Some CPU"
    assert machine.cpu_flags(tmp_path / "none") is None
    monkeypatch.setattr(machine.platform, "machine", lambda: "x86_64")
    env = {}
    with pytest.raises(
        InputError, match=r"cpu kind 'amx' needs CPU flag\(s\) avx512_fp16, amx_tile, amx_bf16, amx_int8"
    ):
        machine.apply_kind("amx", env, flags=AVX512_BF16_CPU)
    assert env == {}  # nothing set before the refusal
    assert machine.refusal("avx512_bf16", AVX512_BF16_CPU) is None
    assert "avx512_bf16" in machine.refusal("avx512_bf16", set(machine.KINDS["avx512"].flags))
    assert machine.refusal("native", set()) is None  # the libraries' own choice needs nothing
    # where the flags cannot be read, or the machine is not x86, a capped kind cannot be checked
    monkeypatch.setattr(machine, "cpu_flags", lambda: None)
    assert "unreadable" in machine.refusal("avx2")
    assert "this machine is aarch64" in machine.refusal("avx2", AVX512_BF16_CPU, machine="aarch64")


def test_the_command_line_refuses_a_kind_before_any_command_runs(monkeypatch, capsys):
    monkeypatch.setattr(machine, "cpu_flags", lambda: AVX512_BF16_CPU)
    monkeypatch.setattr(machine.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr("orthrus.cli.COMMANDS", {"boom": "no.such.module"})  # never imported
    assert cli(["--cpu-kind", "amx", "boom"]) == 2
    assert "cpu kind 'amx' needs CPU flag(s)" in capsys.readouterr().err
    assert cli(["--cpu-kind"]) == 2 and "expected --cpu-kind KIND" in capsys.readouterr().err
    # torch is loaded in this test process: a kind that would change its switches is refused
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert cli(["--cpu-kind=avx2", "boom"]) == 2 and "before torch loads" in capsys.readouterr().err


def _decode(tmp_path, kind: str, threads: int) -> tuple[subprocess.CompletedProcess, Path]:
    prompts = save_tiny(tmp_path, {"teacher": tiny_base(0, attn="sdpa")}, ["w5 w6 w7", "w8 w9"])
    out = tmp_path / f"{kind}.parquet"
    args = ["--model-path", str(tmp_path / "teacher"), "--model-name", "t", "--prompts", str(prompts)]
    args += ["--decoder", "ar-ref", "--precision", "bf16", "--attention", "sdpa", "--max-new-tokens", "4"]
    args += ["--threads", str(threads), "--no-progress", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in machine.RECORDED}
    cmd = [sys.executable, "-m", "orthrus", "--cpu-kind", kind, "decode", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300), out


def test_a_decoding_row_records_the_kind_that_ran(tmp_path):
    """`orthrus --cpu-kind avx2 decode`: the rows' env says ATen ran its AVX2 kernels, oneDNN was capped
    at AVX2 (so torch kept the bf16 products), and the threads the job ran; on a CPU without AVX2 the
    kind is refused by name before the job starts."""
    if machine.refusal("avx2"):
        done, _ = _decode(tmp_path, "avx2", 2)
        assert done.returncode == 2 and "cpu kind 'avx2'" in done.stderr
        return
    done, out = _decode(tmp_path, "avx2", 2)
    assert done.returncode == 0, done.stderr[-2000:]
    env = json.loads(pd.read_parquet(out).env.iloc[0])
    assert env["cpu_kind"] == "avx2" and env["aten_cpu_capability"] == "AVX2" and env["num_threads"] == 2
    assert env["cpu_switches"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["onednn_bf16_matmul"] == "aten"
    assert env["dtype"] == "bf16" and env["device"] == "cpu"  # the fields from before, unchanged


def _claims(verdicts: dict[tuple[str, str], str]) -> pd.DataFrame:
    return pd.DataFrame([{"claim": c, "subject": s, "verdict": v} for (c, s), v in verdicts.items()])


BASE = {("fp32-exact", "every fp32 cell"): "holds", ("bf16-inexact", "m/orthrus/bf16"): "holds"}


def test_the_verdict_table_and_the_invariance_claim_on_synthetic_runs():
    same = mc.verdict_table({"native-t1": _claims(BASE), "avx2-t1": _claims(BASE), "avx2-t2": _claims(BASE)})
    assert list(same.columns) == ["claim", "subject", "native-t1", "avx2-t1", "avx2-t2", "agree"]
    assert same["agree"].all() and mc.invariance_row(same)["verdict"] == "holds"
    flipped = BASE | {("bf16-inexact", "m/orthrus/bf16"): "fails"}
    silent = BASE | {("sampling", "x"): "untestable"}  # absent in one run, untestable in another: no finding
    table = mc.verdict_table({"native-t1": _claims(silent), "avx2-t1": _claims(flipped), "avx2-t2": _claims(BASE)})
    row = mc.invariance_row(table)
    assert row["verdict"] == "fails" and row["statistic"] == 1 and row["n"] == 3
    assert "bf16-inexact/m/orthrus/bf16 (native-t1=holds, avx2-t1=fails, avx2-t2=holds)" in row["reason"]
    assert mc.invariance_row(mc.verdict_table({"native-t1": _claims(BASE)}))["verdict"] == "untestable"
    # the machine claims themselves speak of environments, not in one: left out of the comparison
    own = _claims(BASE | {(mc.INVARIANT, "every claim and subject"): "untestable"})
    assert mc.INVARIANT not in set(mc.verdict_table({"a-t1": own, "b-t1": _claims(BASE)})["claim"])


def _probes(digests: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({"env": list(digests), mc.PLANTED_PRODUCT: list(digests.values())})


def test_the_planted_control_is_caught_where_the_bytes_differ_and_untestable_where_they_do_not(monkeypatch):
    table = mc.verdict_table({e: _claims(BASE) for e in ("native-t1", "avx2-t1", "avx2-t2")})
    row = mc.control_row(table, _probes({"native-t1": "aa", "avx2-t1": "bb", "avx2-t2": "bb"}))
    assert row["verdict"] == "holds" and row["statistic"] == 1
    assert "flipped fp32-exact/every fp32 cell under avx2-t1, avx2-t2" in row["reason"] and "caught" in row["reason"]
    alike = mc.control_row(table, _probes({"native-t1": "aa", "avx2-t1": "aa", "avx2-t2": "aa"}))
    assert alike["verdict"] == "untestable" and "alike" in alike["reason"]
    # a comparison blind to verdicts (every pair agreeing) lets the planted flip through: the control fails
    monkeypatch.setattr(mc, "verdicts_agree", lambda a, b: True)
    assert mc.control_row(table, _probes({"native-t1": "aa", "avx2-t1": "bb", "avx2-t2": "bb"}))["verdict"] == "fails"


def _run(root: Path, verdicts: dict, rate: float) -> Path:
    """A run's tables directory: its claims.csv and one match_overall.csv cell."""
    root.mkdir(parents=True)
    c = _claims(verdicts)
    text = ("description", "source", "statistic_name", "test", "threshold", "reason")
    full = {col: c[col] if col in c else ("-" if col in text else 0) for col in CLAIMS_COLUMNS}
    pd.DataFrame(full).to_csv(root / "claims.csv", index=False)
    cell = {"model": "m", "decoder": "orthrus", "precision": "bf16", "attention": "sdpa", "n": 96}
    ci = {"ci_low": rate - 0.1, "ci_high": rate + 0.1, "n_errors_excluded": 0}
    pd.DataFrame([cell | {"match_rate": rate} | ci]).to_csv(root / "match_overall.csv", index=False)
    return root


def _probe(tmp_path: Path, kind: str) -> Path:
    """`orthrus --cpu-kind KIND machine-probe`, in its own process: the kind's real arithmetic."""
    out = tmp_path / f"{kind}.json"
    env = {k: v for k, v in os.environ.items() if k not in machine.RECORDED}
    cmd = [sys.executable, "-m", "orthrus", "--cpu-kind", kind, "machine-probe", "--threads", "1", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_compare_envs_writes_the_tables_and_the_claims_catch_the_planted_control(tmp_path):
    """Two environments whose honest verdicts agree; the planted control flips one where the bf16
    product's bytes, computed under each kind in its own process, differ: caught wherever the kinds'
    arithmetic differs (native and avx2 on a CPU with AVX-512 BF16, docs/MACHINES.md), untestable
    where the CPU computes it alike under both (an AVX2-only CPU, whose native kind is avx2)."""
    kinds = ["native", "avx2"] if not machine.refusal("avx2") else ["native", "native"]
    a, b = _run(tmp_path / "a", BASE, 0.5), _run(tmp_path / "b", BASE, 0.6)
    probes = [_probe(tmp_path, kinds[0]), _probe(tmp_path / "second", kinds[1])]
    names = [f"{kinds[0]}:1", f"{kinds[1]}:1" if kinds[1] != kinds[0] else "native2:1"]
    out = tmp_path / "tables"
    argv = [f"--run={names[0]}={a}", f"--run={names[1]}={b}", f"--probe={names[0]}={probes[0]}"]
    argv += [f"--probe={names[1]}={probes[1]}", "--out-dir", str(out), "--figure", str(tmp_path / "fig")]
    assert compare_envs(argv) == 0
    assert (tmp_path / "fig.png").exists() and (tmp_path / "fig.pdf").exists()
    match = pd.read_csv(out / "match_by_env.csv")
    assert list(match["match_rate"]) == [0.5, 0.6] and list(match["threads"]) == [1, 1]
    rows = claims.claims_table(out).set_index("claim")
    assert rows.loc[mc.INVARIANT, "verdict"] == "holds"
    probes_df = pd.read_csv(out / mc.MACHINE_PROBES)
    differ = probes_df[mc.PLANTED_PRODUCT].nunique() > 1
    assert rows.loc[mc.PLANTED, "verdict"] == ("holds" if differ else "untestable"), rows.loc[mc.PLANTED, "reason"]
    if machine.cpu_flags() and AVX512_BF16_CPU <= machine.cpu_flags():
        # where oneDNN has AVX-512 BF16, native's bf16 product is oneDNN's and avx2's is torch's own
        assert differ and list(probes_df["onednn_bf16_matmul"]) == ["brg_matmul:avx512_core_bf16", "aten"]
    # --claims stands in for a run's own claims.csv: --out-dir may then be that run's tables directory
    other = _run(tmp_path / "c", BASE | {("bf16-inexact", "m/orthrus/bf16"): "fails"}, 0.6) / "claims.csv"
    assert (
        compare_envs([f"--run=native:1={a}", f"--run=avx2:1={b}", f"--claims=avx2:1={other}", "--out-dir", str(a)]) == 0
    )
    assert claims.claims_table(a).set_index("claim").loc[mc.INVARIANT, "verdict"] == "fails"
    with pytest.raises(InputError, match="expected KIND:THREADS=PATH"):
        compare_envs(["--run", f"avx2={a}", "--run", f"native:1={b}", "--out-dir", str(out)])
