"""Power planned before a run (orthrus/report/claims/power.py): the n a claim's test needs, and the
verdict `underpowered` where the config gives less, whatever the data said."""

import math

import pandas as pd
import pytest

from orthrus.config import read_section
from orthrus.report.claims import claims_table
from orthrus.report.claims.base import Settings
from orthrus.report.claims.power import Power, apply, pilot_from_claims
from orthrus.report.compare_runs import compare, format_report
from orthrus.stats import Pilot, needed_n, power

REAL = "docs/real-model"


def test_power_grows_with_n_and_needed_n_is_the_first_n_that_reaches_the_target():
    pilot = Pilot(effect=0.37, se=0.146, n=36)
    powers = [power(pilot, n, 0.05) for n in (10, 36, 61, 200)]
    assert powers == sorted(powers) and powers[-1] > 0.99
    assert power(pilot, 36, 0.05) == pytest.approx(0.72, abs=0.02)  # 0.37 / 0.146 = 2.53 sd at the pilot's n
    n = needed_n(pilot, 0.05, 0.9)
    assert power(pilot, n, 0.05) >= 0.9 > power(pilot, n - 1, 0.05)
    assert needed_n(Pilot(-0.37, 0.146, 36), 0.05, 0.9) == n  # the sign of the effect does not matter


# the run of configs/smollm2.yaml before the power plan (docs/real-model at cd7781b), its two claims
PILOT_RUN = pd.DataFrame(
    {
        "claim": ["ppl-higher-when-diverging"] * 2 + ["beta1-negative"] * 2,
        "subject": ["m/prompt-lookup/bf16/sdpa", "ce-k8/orthrus/bf16/sdpa"] * 2,
        "statistic": [0.3659, 0.4411, -12.733, float("nan")],
        "ci_low": [0.0795, 0.2011, -22.784, float("nan")],
        "ci_high": [0.6522, 0.6810, -2.682, float("nan")],
        "n": [36, 48, 33, 48],
    }
)


def test_a_run_gives_its_weakest_cell_as_the_pilot():
    p = pilot_from_claims(PILOT_RUN, "ppl-higher-when-diverging")
    # prompt lookup's difference (0.37 [0.08, 0.65], 36 prompts) is weaker than Orthrus's
    assert p.n == 36 and p.effect == pytest.approx(0.366, abs=1e-3) and p.se == pytest.approx(0.146, abs=1e-3)
    assert pilot_from_claims(PILOT_RUN, "beta1-negative").n == 33  # Orthrus's fit did not converge: no estimate
    assert pilot_from_claims(PILOT_RUN, "no-such-claim") is None


def _plan(target=0.9):
    return {"target": target, "pilot": {"ppl-higher-when-diverging": {"effect": 0.37, "se": 0.146, "n": 36}}}


def test_a_short_plan_says_underpowered_whatever_the_test_said():
    """Two machines' rows for the same cell, one where Welch's test held and one where it failed: with
    the plan short at n = 36, both say underpowered; with n = 72 the test's own verdicts stand."""
    row = {"claim": "ppl-higher-when-diverging", "subject": "m/prompt-lookup/bf16/sdpa", "reason": "r"}
    held, failed = pd.DataFrame([row | {"verdict": "holds"}]), pd.DataFrame([row | {"verdict": "fails"}])
    plan = {"ppl-higher-when-diverging": Pilot(0.37, 0.146, 36)}
    for n, expect in ((36, ("underpowered", "underpowered")), (72, ("holds", "fails"))):
        got = [apply(df, plan, {row["subject"]: n}, 0.05, 0.9)["verdict"].iloc[0] for df in (held, failed)]
        assert tuple(got) == expect
    short = apply(held, plan, {row["subject"]: 36}, 0.05, 0.9)["reason"].iloc[0]
    assert "planned power 0.72 < 0.9 at n = 36" in short and "needs n >= 59" in short and "holds: r" in short


def test_the_claims_of_the_committed_real_model_run_under_a_plan():
    """The committed run decodes 72 prompts in each bf16 cell: enough for 0.9 at the pilot (59), short of
    0.99 (about 100), where only the planned claim's cells move, to underpowered, their statistics kept."""
    plain = claims_table(REAL)
    assert claims_table(REAL, Settings(power=read_section(Power, _plan(), "analysis.power")))["verdict"].equals(
        plain["verdict"]
    )
    planned = claims_table(REAL, Settings(power=read_section(Power, _plan(target=0.99), "analysis.power")))
    changed = planned["verdict"] != plain["verdict"]
    assert set(planned.loc[changed, "claim"]) == {"ppl-higher-when-diverging"}
    assert set(planned.loc[changed, "verdict"]) == {"underpowered"} and changed.sum() == 2
    assert planned.loc[changed, "statistic"].equals(plain.loc[changed, "statistic"])  # the test still reported


def test_compare_runs_counts_underpowered_as_no_finding():
    a = pd.DataFrame(
        {
            "claim": ["c1", "c2", "c3"],
            "subject": ["s"] * 3,
            "verdict": ["holds", "underpowered", "holds"],
            "statistic": [1.0, 0.3, 2.0],
            "ci_low": [math.nan] * 3,
            "ci_high": [math.nan] * 3,
            "reason": [""] * 3,
        }
    )
    b = a.assign(verdict=["underpowered", "fails", "fails"])
    m = compare(a, b)
    assert m["agree"].tolist() == [True, True, False]
    assert "3 claim(s), 1 verdict(s) differ (2 underpowered in either run: no finding)" in format_report(m, "A", "B")


def test_orthrus_claims_refuses_a_power_section_it_cannot_read(tmp_path):
    from orthrus.errors import InputError
    from orthrus.report.claims import main

    with pytest.raises(InputError, match=r"bad --power \(analysis.power\): pilot.beta1-negative.n: required key"):
        main(
            [
                "--tables",
                REAL,
                "--power",
                '{"pilot": {"beta1-negative": {"effect": 1}}}',
                "--out",
                str(tmp_path / "c.csv"),
            ]
        )


def test_orthrus_power_plans_each_tested_cell_from_the_grid_and_the_prompts(capsys):
    """The default's bf16 speculative cells under a pilot that needs 61 prompts: prompt lookup decodes 6
    per domain (72 of 12 x 8), the others every prompt (96), all enough; a grid of 3 per domain for
    ce-k8 (36) leaves its loop underpowered."""
    from orthrus.plan.study_config import load
    from orthrus.power import main, plan_rows

    counts = pd.Series({f"d{i}": 8 for i in range(12)})
    pilot = {"analysis": {"power": {"pilot": {"ppl-higher-when-diverging": {"effect": 0.366, "se": 0.146, "n": 36}}}}}
    rows = plan_rows(load(["config.yaml"], pilot), counts).set_index("subject")
    assert set(rows.index) == {
        "teacher/prompt-lookup/bf16/sdpa",
        "teacher/assisted/bf16/sdpa",
        "ce-k8/orthrus/bf16/sdpa",
        "kl-k8/orthrus/bf16/sdpa",
    }
    assert (
        rows.loc["teacher/prompt-lookup/bf16/sdpa", "n"] == 72
        and rows["n"].drop("teacher/prompt-lookup/bf16/sdpa").eq(96).all()
    )
    assert (rows["verdict"] == "tested").all() and (rows["needs"] == 61).all()
    short = pilot | {"decode": {"grids": {"ce-k8": {"prompts_per_domain": {"bf16": 3}}}}}
    rows = plan_rows(load(["config.yaml"], short), counts).set_index("subject")
    assert rows.loc["ce-k8/orthrus/bf16/sdpa", "verdict"] == "underpowered"
    assert rows.loc["ce-k8/orthrus/bf16/sdpa", "n"] == 36
    assert main([]) == 0 and "no claim planned" in capsys.readouterr().out  # the default plans none


def test_orthrus_power_reads_a_pilot_off_a_run(tmp_path, capsys):
    import yaml

    from orthrus.power import main

    PILOT_RUN.to_csv(tmp_path / "claims.csv", index=False)
    assert main(["--pilot", str(tmp_path / "claims.csv")]) == 0
    section = yaml.safe_load(capsys.readouterr().out)["analysis"]["power"]
    assert set(section["pilot"]) == {"ppl-higher-when-diverging", "beta1-negative"}
    assert section["pilot"]["beta1-negative"]["n"] == 33


def test_orthrus_power_prints_and_writes_the_plan_of_config_files(tmp_path, capsys):
    import yaml

    from orthrus.power import main

    overlay = tmp_path / "power.yaml"
    pilot = {"beta1-negative": {"effect": -12.7, "se": 5.13, "n": 33}}
    overlay.write_text(yaml.safe_dump({"analysis": {"power": {"pilot": pilot}}}))
    prompts = tmp_path / "eval.parquet"
    rows = [(f"d{i}-{k}", f"d{i}", f"prompt {i} {k}") for i in range(12) for k in range(8)]
    pd.DataFrame(rows, columns=["prompt_id", "domain", "prompt"]).to_parquet(prompts)
    out = tmp_path / "power.csv"
    args = ["--configfile", "config.yaml", str(overlay), "--prompts", str(prompts), "--out", str(out)]
    assert main(args) == 0
    assert "4 claim cell(s), 0 underpowered" in capsys.readouterr().out
    plan = pd.read_csv(out)
    assert (plan["claim"] == "beta1-negative").all() and (plan["needs"] == 57).all() and len(plan) == 4
