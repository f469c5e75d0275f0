"""orthrus.contracts: one light module, and the design page rendered from its catalogue (orthrus.artefacts)."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

from orthrus import artefacts, contracts

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "DESIGN.md"


def test_design_page_is_rendered_from_the_contracts():
    assert artefacts.main(["--design", str(DESIGN), "--check"]) == 0
    text = DESIGN.read_text()
    for name, artefact in artefacts.ARTEFACTS.items():
        assert f"### {name}" in text and artefact.path in text
    assert all(f"`{f}`" in text for f in contracts.FIGURES)


def test_a_stale_design_page_is_caught_and_rewritten(tmp_path):
    page = tmp_path / "DESIGN.md"
    page.write_text(DESIGN.read_text().replace("`prompt_id`", "`id`", 1))
    assert artefacts.main(["--design", str(page), "--check"]) == 1
    assert artefacts.main(["--design", str(page)]) == 0
    assert page.read_text() == DESIGN.read_text()


def test_design_page_stands_on_its_own():
    assert "../" not in DESIGN.read_text()


def test_contracts_import_nothing_heavy():
    """The workflow imports it while parsing: no torch, pandas or transformers."""
    code = (
        "import sys, orthrus.contracts, orthrus.artefacts; heavy = {'torch', 'pandas', 'numpy', 'transformers'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_job_imports_its_command_with_the_collector_paused_then_frozen():
    """The console script and `python -m orthrus` (a job's own process) import the command's module
    with no garbage collection and freeze what it made; in-process (tests) neither happens."""
    code = (
        "import gc, sys; from orthrus import cli; runs = []; "
        "gc.callbacks.append(lambda phase, info: runs.append(info) if phase == 'start' else None); "
        "cli._import('orthrus.decode.frontier', job=sys.argv[1] == 'job'); "
        "print(len(runs), gc.get_freeze_count(), gc.isenabled())"
    )
    job, here = (
        subprocess.run(
            [sys.executable, "-c", code, kind], check=True, cwd=ROOT, capture_output=True, text=True
        ).stdout.split()
        for kind in ("job", "in-process")
    )
    assert job[0] == "0" and int(job[1]) > 50_000 and job[2] == "True", job  # pandas: about 100,000
    assert int(here[0]) > 0 and here[1] == "0", here
    entry = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}["orthrus"]
    assert entry == "orthrus.cli:script" and "script()" in (ROOT / "orthrus" / "__main__.py").read_text()


def test_every_table_ends_with_its_error_count():
    for name, cols in contracts.TABLES.items():
        assert (cols[-1] == contracts.ERRORS) == name.endswith(".csv"), name


def test_every_artefact_column_is_a_column_name():
    """DESIGN's artefact section lists real columns only (no separator or placeholder standing in for
    a second file's columns: a file of its own is an artefact of its own)."""
    import re

    for name, artefact in artefacts.ARTEFACTS.items():
        bad = [c for c in artefact.columns if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(c))]
        assert not bad, (name, bad)
