"""docs/RESULTS.md's results section and the README's claims table are the committed default run's
tables, rendered."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from orthrus.report import summary
from orthrus.zoo.record import BLOCK as ZOO_BLOCK

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "docs" / "results"


# the documents with rendered numbers, each checked against the committed run (docs/REAL-MODEL.md has its own)
RENDERED = [
    p
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if p.name != "REAL-MODEL.md"
    and (summary.VALUE.search(p.read_text()) or any(b in p.read_text() for b, _ in summary.BLOCKS.values()))
]


def test_results_and_readme_blocks_are_rendered_from_the_committed_run():
    docs = [str(ROOT / "docs" / "RESULTS.md"), str(ROOT / "README.md")]
    assert summary.main(["--tables", str(RUN), "--readme", docs[0], "--readme", docs[1], "--check"]) == 0
    assert summary.BEGIN in Path(docs[0]).read_text() and "<!-- claims:begin -->" in Path(docs[1]).read_text()


def test_every_rendered_number_of_the_readme_and_docs_is_the_committed_tables():
    """`orthrus summary --tables docs/results --readme README.md --readme docs/X.md ... --check`."""
    assert {ROOT / "README.md", ROOT / "docs" / "RESULTS.md"} <= set(RENDERED)
    args = ["--tables", str(RUN)] + [a for p in RENDERED for a in ("--readme", str(p))]
    assert summary.main([*args, "--check"]) == 0
    assert summary.VALUE.search((ROOT / "README.md").read_text()), "the README's findings are rendered values"


def test_the_readme_quotes_no_result_by_hand():
    """Outside its rendered blocks, values and code, the README has no decimal number or `n of m` count
    (configuration facts such as "1.1M parameters" or "Qwen3-1.7B" are no results and stay)."""
    text = (ROOT / "README.md").read_text()
    # the zoo's findings are rendered from docs/zoo/zoo.csv (checked in tests/test_zoo.py)
    for begin, end in [*summary.BLOCKS.values(), ZOO_BLOCK]:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", summary.VALUE.sub("", text), flags=re.S)
    assert not re.findall(r"\b\d+\.\d+\b|\b\d+ of \d+\b", text)


def _docs_copy(tmp_path: Path) -> Path:
    """README.md and docs/ (the committed runs' tables, no figures) under `tmp_path`: the README's values
    name their tables by path."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("img", "findings"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    return tmp_path / "README.md"


@pytest.mark.parametrize(
    "old, new",
    [
        ("| beta1 -7.177 [", "| beta1 -7.2 ["),  # a number in the claims block
        ("-->0.52<!-- /v --> for `ce-k8`", "-->0.50<!-- /v --> for `ce-k8`"),  # an inline value
    ],
)
def test_a_hand_edited_number_fails_the_check_and_rendering_restores_it(tmp_path, old, new):
    readme = _docs_copy(tmp_path)
    text = readme.read_text()
    assert text.count(old) == 1, old
    readme.write_text(text.replace(old, new))
    args = ["--tables", str(tmp_path / "docs" / "results"), "--readme", str(readme)]
    assert summary.main([*args, "--check"]) == 1
    assert summary.main(args) == 0 and readme.read_text() == text


def test_the_real_model_page_is_rendered_from_its_committed_run():
    """docs/REAL-MODEL.md's numbers are configs/smollm2.yaml's committed run (docs/real-model/)."""
    page = ROOT / "docs" / "REAL-MODEL.md"
    assert summary.main(["--tables", str(ROOT / "docs" / "real-model"), "--readme", str(page), "--check"]) == 0
    assert "| fp32-exact | every fp32 cell |" in page.read_text()


def test_a_changed_claim_makes_the_readme_stale(tmp_path):
    readme = _docs_copy(tmp_path)
    tables = tmp_path / "docs" / "results"
    claims = pd.read_csv(tables / "claims.csv")
    claims.loc[claims["claim"] == "fp32-exact", "verdict"] = "fails"
    claims.to_csv(tables / "claims.csv", index=False)
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 1
    assert summary.main(["--tables", str(tables), "--readme", str(readme)]) == 0
    row = next(line for line in readme.read_text().splitlines() if line.startswith("| fp32-exact |"))
    assert "| fails (" in row and "| holds" not in row, row
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 0


def test_a_changed_table_makes_the_results_stale(tmp_path):
    _docs_copy(tmp_path)
    tables, readme = tmp_path / "docs" / "results", tmp_path / "docs" / "RESULTS.md"
    mo = pd.read_csv(tables / "match_overall.csv")
    mo.loc[mo["decoder"].isin(summary.ORTHRUS) & (mo["precision"] == "fp32"), "match_rate"] = 0.5
    mo.to_csv(tables / "match_overall.csv", index=False)
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 1
    assert summary.main(["--tables", str(tables), "--readme", str(readme)]) == 0
    fp32_row = next(line for line in readme.read_text().splitlines() if line.startswith("| fp32 |"))
    assert "0.50" in fp32_row and "1.00" not in fp32_row, fp32_row
    assert summary.main(["--tables", str(tables), "--readme", str(readme), "--check"]) == 0


def test_missing_table_and_missing_markers_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="match_overall.csv"):
        summary.render(tmp_path)
    with pytest.raises(ValueError, match="results:begin"):
        summary.replace_block("no markers here", "x")
    with pytest.raises(ValueError, match="results:begin.*claims:begin"):
        summary.update("no markers here", RUN)


def test_a_value_is_one_row_or_an_aggregate_in_its_format():
    v = lambda spec: summary.value(spec, RUN, ROOT / "docs")
    assert v("decoders.csv match_rate decoder=orthrus model=ce-k8 precision=fp32") == "1.000"
    assert v("decoders.csv n min decoder=orthrus :d") == "48"
    assert v("decoders.csv decoder count precision=fp32 decoder!=orthrus :d") == "2"
    assert v("decoders.csv n_structural sum 'audit!=not lossless' :d") == "0"
    assert v("decoders.csv n_structural sum decoder~orthrus.* :d") == v("forensics.csv n_structural sum model~.*-k8 :d")
    assert v("real-model/decoders.csv model precision=fp32 decoder=orthrus") == "ce-k8"  # a path: the document's folder
    with pytest.raises(ValueError, match="selects 2 rows"):
        v("decoders.csv match_rate decoder=orthrus precision=fp32")
    with pytest.raises(ValueError, match="selects 0 rows"):  # a condition that matches nothing is no number
        v("decoders.csv match_rate max decoder~orthr")
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        v("nope.csv x")


def _with_eager(tables: Path, model: str) -> Path:
    """`tables` as if `model` had also decoded on eager, with its sdpa results there."""
    for path in tables.glob("*.csv"):
        if path.name.startswith("benchmarks"):  # the benchmarks run on one kernel whatever the grid
            continue
        t = pd.read_csv(path)
        # the frontier's table has every kernel already
        if {"model", "attention"} <= set(t.columns) and not ((t["model"] == model) & (t["attention"] == "eager")).any():
            extra = t[(t["model"] == model) & (t["attention"] == "sdpa")]
            extra = extra[extra["decoder"].isin(summary.ORTHRUS)] if "decoder" in extra.columns else extra
            extra = extra.assign(attention="eager")
            pd.concat([t, extra]).to_csv(path, index=False)
    return tables


def test_a_model_narrowed_by_decode_grids_is_rendered_with_dashes(tmp_path):
    """ce-k8 on eager and sdpa, kl-k8 narrowed to sdpa: its eager cells are dashes; with kl-k8 on
    eager too there are none."""
    shutil.copytree(RUN, tmp_path / "narrowed")
    narrowed_run = _with_eager(tmp_path / "narrowed", "ce-k8")
    shutil.copytree(narrowed_run, tmp_path / "full")
    narrowed, full = summary.render(narrowed_run), summary.render(_with_eager(tmp_path / "full", "kl-k8"))
    assert "not decode it" not in full
    row = lambda text: next(x for x in text.splitlines() if x.startswith("| fp32 | ") and " / " in x)
    eager, sdpa = row(narrowed).split(" | ")[1:3]  # a cell per kernel: ce-k8 / kl-k8
    assert eager.endswith(" / -") and "-" not in sdpa and "-" not in row(full)
    assert "`-`: no result in that cell (a model narrowed by `decode.grids` does not decode it)." in narrowed
    # the per-domain, PPL and TPF tables stay at a setting both models ran, so no model is n/a there
    assert "Per domain, bf16 with sdpa" in narrowed and "Tokens per forward, fp32, sdpa" in narrowed
    block = narrowed.split("Divergence and perplexity", 1)[1].split("\n\n")[1]
    assert "| kl-k8 |" in block and "n/a |" not in block.split("| kl-k8 |")[1].split("\n")[0]


def test_diverging_setting_prefers_cells_every_model_ran():
    """Model b ran sdpa only: eager's mean (a alone) is lower, but the setting is the shared sdpa."""
    rows = [
        ("a", "bf16", "eager", 0.5),
        ("a", "bf16", "sdpa", 0.9),
        ("b", "bf16", "sdpa", 0.2),
        ("a", "fp32", "eager", 1.0),
        ("a", "fp32", "sdpa", 1.0),
        ("b", "fp32", "sdpa", 1.0),
    ]
    overall = pd.DataFrame(rows, columns=["model", "precision", "attention", "match_rate"]).assign(decoder="orthrus")
    assert summary.diverging_setting(overall) == ("bf16", "sdpa")
    # with no cell every model ran, the worst cell over all
    overall = overall[~((overall.model == "b") & (overall.precision == "bf16"))]
    assert summary.diverging_setting(overall) == ("bf16", "eager")
