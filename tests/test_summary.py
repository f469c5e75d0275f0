"""README.md and docs/*.md that quote results are their templates (docs/src/) rendered from the
committed runs' tables; docs/RESULTS.md's results section is the committed default run's tables."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from orthrus.report import summary

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUN = DOCS / "results"
SOURCES = sorted((DOCS / "src").glob("*.md"))
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def test_every_page_is_its_template_rendered_from_the_committed_tables():
    """`orthrus summary --docs docs --check`: each page equals a fresh rendering of its template."""
    assert {summary.target(s) for s in SOURCES} >= {ROOT / "README.md", DOCS / "RESULTS.md", DOCS / "ENGINES.md"}
    assert summary.main(["--docs", str(DOCS), "--check"]) == 0


def test_no_page_has_an_inline_value_marker_nor_a_line_over_200_characters_outside_tables():
    """The source a maintainer edits and the page a reader reads are plain Markdown: a number in a sentence
    is a named value of the template, a table row may be long."""
    for path in [*PAGES, *SOURCES]:
        text = path.read_text()
        assert "<!-- v " not in text and "<!-- /v -->" not in text, f"{path}: an inline value marker"
        long = [i for i, line in enumerate(text.splitlines(), 1) if len(line) > 200 and not line.startswith("|")]
        assert not long, f"{path}: lines {long} are over 200 characters (wrap them to about 110)"


def test_every_named_value_is_used_and_every_page_says_where_it_comes_from():
    values = yaml.safe_load((DOCS / "src" / summary.VALUES).read_text())
    used = set().union(*(re.findall(r"\{\{ (\w+) \}\}", s.read_text()) for s in SOURCES))
    assert not set(values) - used, "values no template uses: " + ", ".join(sorted(set(values) - used))
    for source in SOURCES:
        assert summary.target(source).read_text().startswith(f"<!-- rendered from docs/src/{source.name} ")


def test_the_readme_quotes_no_result_by_hand():
    """Outside its named values, generated blocks and code, the README's source has no decimal number
    or `n of m` count (configuration facts such as "1.1M parameters" or "Qwen3-1.7B" are no results)."""
    text = (DOCS / "src" / "README.md").read_text()
    text = re.sub(r"```.*?```|\{\{.*?\}\}", "", text, flags=re.S)
    assert not re.findall(r"\b\d+\.\d+\b|\b\d+ of \d+\b", text)


def _docs_copy(tmp_path: Path) -> Path:
    """README.md and docs/ (the templates and the committed runs' tables, no figures) under `tmp_path`."""
    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("img"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    return tmp_path / "README.md"


@pytest.mark.parametrize(
    "old, new",
    [
        ("| beta1 -7.177 [", "| beta1 -7.2 ["),  # a number in the claims table
        ("(match 0.52 for `ce-k8`", "(match 0.50 for `ce-k8`"),  # a named value in a sentence
    ],
)
def test_a_hand_edited_number_fails_the_check_and_rendering_restores_it(tmp_path, old, new):
    readme = _docs_copy(tmp_path)
    text = readme.read_text()
    assert text.count(old) == 1, old
    readme.write_text(text.replace(old, new))
    args = ["--docs", str(tmp_path / "docs")]
    assert summary.main([*args, "--check"]) == 1
    assert readme.read_text() != text  # the check writes nothing
    assert summary.main(args) == 0 and readme.read_text() == text


def test_a_changed_claim_makes_the_readme_stale(tmp_path):
    readme = _docs_copy(tmp_path)
    claims = pd.read_csv(tmp_path / "docs" / "results" / "claims.csv")
    claims.loc[claims["claim"] == "fp32-exact", "verdict"] = "fails"
    claims.to_csv(tmp_path / "docs" / "results" / "claims.csv", index=False)
    args = ["--docs", str(tmp_path / "docs")]
    assert summary.main([*args, "--check"]) == 1
    assert summary.main(args) == 0
    row = next(line for line in readme.read_text().splitlines() if line.startswith("| fp32-exact |"))
    assert "| fails (" in row and "| holds" not in row, row
    assert summary.main([*args, "--check"]) == 0


def test_a_changed_table_makes_the_results_and_a_generated_table_stale(tmp_path):
    _docs_copy(tmp_path)
    tables = tmp_path / "docs" / "results"
    mo = pd.read_csv(tables / "match_overall.csv")
    mo.loc[mo["decoder"].isin(summary.ORTHRUS) & (mo["precision"] == "fp32"), "match_rate"] = 0.5
    mo.to_csv(tables / "match_overall.csv", index=False)
    load = pd.read_csv(tmp_path / "docs" / "openai" / "load.csv")
    load.loc[load["model"] == "vllm-bf16-c4", "distinct_max"] = 7
    load.to_csv(tmp_path / "docs" / "openai" / "load.csv", index=False)
    args = ["--docs", str(tmp_path / "docs")]
    assert summary.main([*args, "--check"]) == 1
    assert summary.main(args) == 0
    results = (tmp_path / "docs" / "RESULTS.md").read_text()
    fp32_row = next(line for line in results.splitlines() if line.startswith("| fp32 |"))
    assert "0.50" in fp32_row and "1.00" not in fp32_row, fp32_row
    row = next(
        x for x in (tmp_path / "docs" / "ENGINES.md").read_text().splitlines() if x.startswith("| vllm-bf16-c4 |")
    )
    assert row.split(" | ")[6] == "7", row
    assert summary.main([*args, "--check"]) == 0


def test_a_missing_table_value_or_template_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="match_overall.csv"):
        summary.render(tmp_path)
    with pytest.raises(FileNotFoundError, match="no templates"):
        summary.main(["--docs", str(tmp_path), "--check"])
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / summary.VALUES).write_text("known: results/decoders.csv n min :d\n")
    (tmp_path / "src" / "X.md").write_text("{{ known }} and {{ unknown }}\n")
    with pytest.raises(ValueError, match="no value named unknown in values.yaml"):
        summary.render_page(tmp_path / "src" / "X.md")


def test_a_value_is_one_row_or_an_aggregate_in_its_format():
    v = lambda spec: summary.value(spec, DOCS)
    assert v("results/decoders.csv match_rate decoder=orthrus model=ce-k8 precision=fp32 :.3f") == "1.000"
    assert v("results/decoders.csv n min decoder=orthrus :d") == "48"
    assert v("results/decoders.csv decoder count precision=fp32 decoder!=orthrus :d") == "2"
    assert v("results/decoders.csv n_structural sum 'audit!=not lossless' :d") == "0"
    assert v("results/decoders.csv n_structural sum decoder~orthrus.* :d") == v(
        "results/forensics.csv n_structural sum model~.*-k8 :d"
    )
    assert v("real-model/decoders.csv model precision=fp32 decoder=orthrus") == "ce-k8"  # no format: as it is
    with pytest.raises(ValueError, match="selects 2 rows"):
        v("results/decoders.csv match_rate decoder=orthrus precision=fp32")
    with pytest.raises(ValueError, match="selects 0 rows"):  # a condition that matches nothing is no number
        v("results/decoders.csv match_rate max decoder~orthr")
    with pytest.raises(ValueError, match="'colour=red' is no KEY=VALUE"):
        v("results/decoders.csv match_rate colour=red")
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        v("results/nope.csv x")


def test_a_table_is_a_row_per_selected_row_with_its_cells_formatted(tmp_path):
    (tmp_path / "t.csv").write_text("name,n,rate\na,3,0.5\nb,,0.25\nc,4,\n")
    cells = {"name": "{name}", "count": "{n:d}", "rate [n]": "{rate:.2f} [{n:d}]"}
    assert summary.table(tmp_path, "t.csv", cells, "name!=c").splitlines() == [
        "| name | count | rate [n] |",
        "|---|---|---|",
        "| a | 3 | 0.50 [3] |",
        "| b |  | 0.25 [] |",  # no number: empty, not nan
    ]
    with pytest.raises(ValueError, match="selects no rows"):
        summary.table(tmp_path, "t.csv", cells, "name=d")


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
