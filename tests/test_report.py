"""`snakemake --report`: every table and figure of the study is in it, each with its caption.

Building the report needs the outputs, and the smoke study that makes them is already run by
tests/test_workflow.py; here placeholder tables and figures stand in for them (a few seconds),
which checks what the report gathers and that every caption file resolves and renders.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from orthrus import contracts

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ROOT / "workflow" / "report"


def workflow_lists():
    """The tables and figures the workflow declares (common.smk reads them from orthrus.contracts)."""
    return {
        "TABLE_FILES": list(contracts.CLAIMS_TABLES)
        + list(contracts.TABLES)
        + list(contracts.BENCHMARK_TABLES)
        + list(contracts.FRONTIER_TABLES)
        + list(contracts.SAMPLING_TABLES)
        + list(contracts.SAMPLING_ENGINE_TABLES)
        + list(contracts.MACHINE_TABLES),
        "FIGURES": list(contracts.FIGURES)
        + [contracts.BENCHMARK_FIGURE, contracts.FRONTIER_FIGURE, contracts.SAMPLING_FIGURE, contracts.MACHINE_FIGURE],
    }


def test_every_caption_belongs_to_an_output_and_back():
    lists = workflow_lists()
    tables = [t[:-4] for t in lists["TABLE_FILES"] if t.endswith(".csv")]
    figures = lists["FIGURES"]
    expected = {f"table_{t}.rst" for t in tables} | {f"figure_{f}.rst" for f in figures}
    present = {p.name for p in CAPTIONS.glob("*.rst")} - {"workflow.rst"}
    assert present == expected


def test_report_gathers_every_table_and_figure_with_captions(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lists = workflow_lists()
    cfg = {
        "teacher": {"source": "tiny"},
        "prompts": {"source": "tiny"},
        "corpus": {"shards": 1, "max_new_tokens": 8},
        "decode": {"precisions": ["fp32"], "attentions": ["eager"], "max_new_tokens": 8},
        "models": {"m": {"warmup_steps": 10}},
        "machine": {"threads": [1, 2]},  # two environments on any CPU: the comparison's tables and figure
        "sampling": {
            "enabled": True,
            "engines": {"plain": {"path": "plain.jsonl"}, "spec": {"path": "spec.jsonl", "reference": "plain"}},
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    for name in ("plain", "spec"):
        (tmp_path / f"{name}.jsonl").write_text("")
    tables, figures = tmp_path / "results/tables", tmp_path / "results/figures"
    tables.mkdir(parents=True)
    figures.mkdir(parents=True)
    csvs = [t for t in lists["TABLE_FILES"] if t.endswith(".csv")]
    for t in csvs:
        (tables / t).write_text("placeholder,value\nx,1\n")
    pngs = lists["FIGURES"]
    for f in pngs:
        fig = plt.figure(figsize=(1, 1))
        fig.savefig(figures / f"{f}.png")
        plt.close(fig)
    out = tmp_path / "report.html"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--report",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    log = res.stdout + res.stderr
    for name in csvs + [f"{f}.png" for f in pngs]:
        assert f"Adding {name} (" in log, f"{name} not in the report"
    html = out.read_text()
    for cap in CAPTIONS.glob("*.rst"):
        if cap.name == "workflow.rst":
            continue
        plain = re.split(r"[*`:(]", cap.read_text())[0].split()[:4]  # the opening words before any markup
        assert " ".join(plain) in html, f"caption {cap.name} not rendered"
    for table in ("Table 2", "Table 3", "Table 4", "Table 7", "Table 8"):
        assert f"{table}</strong>" in html
    # the claims first: the report's opening text points to them, and they are a category of their own
    assert "Start with <strong>Claims</strong>" in html and '"Claims"' in html
