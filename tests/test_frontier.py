"""The price of exactness (`orthrus frontier`): every setting on the same prompts, side by side."""

import json

import pandas as pd
import pytest
from helpers import save_tiny, tiny_orthrus

from orthrus.decode.frontier import main, settings, table
from orthrus.options import DecodeOptions


def test_settings_are_every_cell_then_the_base_cell_guarded():
    base = DecodeOptions(decoder="orthrus", precision="bf16", attention="sdpa", max_new_tokens=7)
    got = [
        (o.precision, o.attention, o.verify_guard)
        for o in settings(base, ["bf16", "fp32"], ["eager", "sdpa"], [0.25, 0.0])
    ]
    assert got == [
        ("bf16", "eager", 0.0),
        ("bf16", "sdpa", 0.0),
        ("fp32", "eager", 0.0),
        ("fp32", "sdpa", 0.0),
        ("bf16", "sdpa", 0.25),
    ]
    assert all(o.max_new_tokens == 7 for o in settings(base, ["fp32"], ["eager"], [0.5]))


def _rows(setting, matches, tokens, seconds, model="m"):
    p, a, g = setting
    return [
        {
            "model": model,
            "precision": p,
            "attention": a,
            "verify_guard": g,
            "prompt_id": f"p{i}",
            "domain": "d",
            "tokens": [1] * tokens,
            "ar_tokens": [1] * tokens,
            "match": m,
            "n_prefill": 1,
            "n_verify": tokens // 2 - 1,
            "n_diffusion": 0,
            "seconds": seconds,
            "env": "{}",
        }
        for i, m in enumerate(matches)
    ]


def test_table_rates_times_and_the_cheapest_exact_setting():
    rows = pd.DataFrame(
        _rows(("bf16", "sdpa", 0.0), [True, False, True, True], 10, 1.0)
        + _rows(("fp32", "sdpa", 0.0), [True] * 4, 10, 0.6)
        + _rows(("bf16", "eager", 0.0), [True] * 4, 10, 0.8)
        + _rows(("bf16", "sdpa", 0.5), [True, False, True, True], 10, 1.2)
    )
    df = table(rows, ("bf16", "sdpa")).set_index(["precision", "attention", "verify_guard"])
    assert df.loc[("bf16", "sdpa", 0.0), "match_rate"] == 0.75 and df.loc[("bf16", "sdpa", 0.0), "time_vs_base"] == 1.0
    assert df.loc[("fp32", "sdpa", 0.0), "time_vs_base"] == pytest.approx(0.6)
    assert df.loc[("bf16", "sdpa", 0.5), "time_vs_base"] == pytest.approx(1.2)
    assert df.loc[("bf16", "sdpa", 0.0), "tpf_verify"] == pytest.approx(40 / 20)
    assert df["exact"].tolist() == [False, True, True, False]
    assert df["cheapest_exact"].tolist() == [False, True, False, False]  # fp32 sdpa: exact and the fastest
    low, high = df.loc[("bf16", "sdpa", 0.0), ["ci_low", "ci_high"]]
    assert low < 0.75 < high
    with pytest.raises(ValueError, match="no unguarded bf16/sdpa"):
        table(rows[rows["precision"] == "fp32"], ("bf16", "sdpa"))


def test_measure_and_table_on_a_saved_model(tmp_path):
    """The CLI end to end on a tiny Orthrus checkpoint: one row per (setting, prompt), prompts
    interleaved over the settings, each compared with the AR view of its own cell; fp32 is exact,
    and TAU = 0 is the plain loop."""
    save_tiny(
        tmp_path,
        {"m": tiny_orthrus(0, 4, "noisy", noise=1e-2, peaked=1.0)},
        {"a1": ("a", "w5 w6 w7"), "a2": ("a", "w9 w3"), "b1": ("b", "w40 w41 w42 w43")},
        prompts_file="eval.parquet",
    )
    base = DecodeOptions(decoder="orthrus", precision="bf16", attention="sdpa", max_new_tokens=12, message="none")
    out = tmp_path / "frontier.parquet"
    assert (
        main(
            [
                "measure",
                "--model-path",
                str(tmp_path / "m"),
                "--model-name",
                "m",
                "--prompts",
                str(tmp_path / "eval.parquet"),
                "--options",
                base.to_json(),
                "--precisions",
                "bf16",
                "fp32",
                "--attentions",
                "eager",
                "sdpa",
                "--guards",
                "0.5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = pd.read_parquet(out)
    assert rows["prompt_id"].tolist() == ["a1"] * 5 + ["b1"] * 5  # the first prompt of each domain, interleaved
    assert rows.groupby(["precision", "attention", "verify_guard"]).size().tolist() == [2] * 5
    assert rows[rows["precision"] == "fp32"]["match"].all()
    assert all(json.loads(e)["dtype"] for e in rows["env"])
    # each setting's SDPA kernels, counted in its own calls: none on eager, this CPU's flash kernel on sdpa
    kernels = {(r.attention, json.dumps(json.loads(r.env)["sdpa_backends"])) for r in rows.itertuples()}
    assert {k for a, k in kernels if a == "eager"} == {"{}"}
    assert all(set(json.loads(k)) == {"flash_attention"} for a, k in kernels if a == "sdpa")
    assert (
        rows[rows["verify_guard"] > 0]["n_verify"].values
        >= rows[(rows["precision"] == "bf16") & (rows["attention"] == "sdpa") & (rows["verify_guard"] == 0)][
            "n_verify"
        ].values
    ).all()
    csv = tmp_path / "exactness_cost.csv"
    assert main(["table", "--inputs", str(out), "--out", str(csv), "--figure", str(tmp_path / "fig")]) == 0
    df = pd.read_csv(csv)
    assert len(df) == 5 and df["exact"][df["precision"] == "fp32"].all() and df["cheapest_exact"].sum() == 1
    assert (
        (tmp_path / "exactness_cost.md").exists()
        and (tmp_path / "fig.png").exists()
        and (tmp_path / "fig.pdf").exists()
    )


def test_measure_refuses_another_decoder(tmp_path):
    with pytest.raises(SystemExit):
        main(
            [
                "measure",
                "--model-path",
                "x",
                "--model-name",
                "m",
                "--prompts",
                "p",
                "--options",
                DecodeOptions(decoder="ar-ref").to_json(),
                "--out",
                str(tmp_path / "f.parquet"),
            ]
        )


def test_time_vs_base_is_the_median_of_per_prompt_ratios():
    """One prompt slowed by the machine's load (10x) does not decide a setting's ratio."""
    base = _rows(("bf16", "sdpa", 0.0), [True] * 3, 10, 1.0)
    fast = _rows(("fp32", "sdpa", 0.0), [True] * 3, 10, 0.5)
    fast[0]["seconds"] = 10.0
    df = table(pd.DataFrame(base + fast), ("bf16", "sdpa")).set_index("precision")
    assert df.loc["fp32", "time_vs_base"] == pytest.approx(0.5)
    assert df.loc["fp32", "seconds_per_token"] == pytest.approx(11.0 / 30)  # the totals stay totals
