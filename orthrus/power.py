"""`orthrus power`: each claim's power, planned from the config before a run.

    orthrus power [--configfile FILE ...] [--prompts EVAL.parquet] [--pilot CLAIMS.csv] [--out CSV]

For every claim the config plans (`analysis.power.pilot`: a pilot run's effect, standard error and n)
and every cell that claim is tested on (the bf16 cells of the lossless speculative decoders), the
prompts the cell will decode, the power the claim's test has there and the prompts a power of
`analysis.power.target` needs: where it falls short the run's verdict will say `underpowered`
(orthrus/report/claims/power.py), whatever the test gives. The prompts per cell come from the plan
(`decode.grids`) and the evaluation prompts: `--prompts` (a run's results/prompts/eval.parquet), else
built here as the prompts stage builds them. `--pilot` reads a pilot off a run's claims.csv and prints
it as the config's `analysis.power` section. The sampling audit plans its own N per prompt in the run
(sampling.two_sample: orthrus/audit/known_p.py), from the trained model: it is said, not computed, here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from orthrus.decoders import names
from orthrus.plan import Study
from orthrus.plan.config import StudyConfig
from orthrus.plan.study_config import EMBEDDED, load
from orthrus.report.claims.power import PLANNED, pilots
from orthrus.stats import needed_n, power

REDUCED = "bf16"  # the precision of Tables 5 and 6 (orthrus/report/claims/base.py)


def eval_counts(config: StudyConfig, prompts: str | None) -> pd.Series:
    """The evaluation prompts per domain: read from `prompts`, else built by `orthrus prompts` with the
    config's prompts section, as the run's first job builds them."""
    if prompts is None:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "prompts.json"
            cfg.write_text(json.dumps(config.model_dump()["prompts"]))
            out = [f"{tmp}/eval.parquet", f"{tmp}/distill.parquet"]
            cmd = [sys.executable, "-m", "orthrus.cli", "prompts", "--config", str(cfg), "--seed", str(config.seed)]
            subprocess.run(cmd + ["--eval-out", out[0], "--distill-out", out[1]], check=True, capture_output=True)
            return pd.read_parquet(out[0])["domain"].value_counts()
    return pd.read_parquet(prompts)["domain"].value_counts()


def planned_cells(study: Study, counts: pd.Series) -> dict[str, int]:
    """Each cell a planned claim is tested on, by its claims subject, and the prompts it decodes."""
    d = study.decode
    runs = [(d.models.teacher, x, None) for x in d.teacher_decoders] + [
        (m, x, m) for m in d.models.orthrus for x in d.model_decoders
    ]
    tested = set(names(role="speculative", lossless=True))
    out = {}
    for model, decoder, grid_model in runs:
        if decoder not in tested:
            continue
        for precision, attention in d.cells(decoder, grid_model):
            if precision == REDUCED:
                per = d.per_domain(decoder, grid_model, precision)
                n = int(counts.clip(upper=per).sum()) if per else int(counts.sum())
                out[f"{model}/{decoder}/{precision}/{attention}"] = n
    return out


def plan_rows(config: StudyConfig, counts: pd.Series) -> pd.DataFrame:
    section = config.analysis.power
    target, alpha = section.target, config.analysis.alpha
    cells = planned_cells(Study(config), counts)
    rows = []
    for claim, pilot in pilots(section).items():
        need = needed_n(pilot, alpha, target)
        for subject, n in cells.items():
            pw = power(pilot, n, alpha)
            verdict = "tested" if pw >= target else "underpowered"
            rows.append({"claim": claim, "subject": subject, "n": n, "power": pw, "needs": need, "verdict": verdict})
    return pd.DataFrame(rows, columns=["claim", "subject", "n", "power", "needs", "verdict"])


def pilot_section(claims_csv: str, target: float) -> dict:
    from orthrus.report.claims.power import pilot_from_claims

    claims = pd.read_csv(claims_csv)
    pilots = {c: pilot_from_claims(claims, c) for c in PLANNED}
    return {
        "target": target,
        "pilot": {c: {"effect": p.effect, "se": p.se, "n": p.n} for c, p in pilots.items() if p is not None},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus power", description=__doc__.split("\n\n")[0])
    ap.add_argument("--configfile", nargs="+", default=[EMBEDDED], help="the study's config file(s), as snakemake's")
    ap.add_argument("--prompts", help="the run's evaluation prompts (results/prompts/eval.parquet)")
    ap.add_argument("--pilot", help="a run's claims.csv: print its pilots as the analysis.power section")
    ap.add_argument("--out", help="also write the plan as a CSV (a committed run's power.csv, docs/real-model)")
    args = ap.parse_args(argv)
    config = load(args.configfile)
    if args.pilot:
        import yaml

        section = pilot_section(args.pilot, config.analysis.power.target)
        sys.stdout.write(yaml.safe_dump({"analysis": {"power": section}}, sort_keys=False))
        return 0
    ts = config.sampling.two_sample
    if config.sampling.enabled and ts.enabled:
        cap = ts.n_samples_max or ts.n_samples
        print(
            f"sampling: N per prompt planned in the run for power {ts.power:g} against the planted sampler, "
            f"between {ts.n_samples} and {cap} (orthrus/audit/known_p.py)"
        )
    rows = plan_rows(config, eval_counts(config, args.prompts))
    if args.out:
        rows.to_csv(args.out, index=False)
    if rows.empty:
        print("no claim planned (analysis.power.pilot is empty): every verdict is its test's")
        return 0
    target = config.analysis.power.target
    print(f"power planned at target {target:g}, level {config.analysis.alpha:g}:")
    print(rows.to_string(index=False, formatters={"power": "{:.3f}".format}))
    short = int((rows["verdict"] == "underpowered").sum())
    print(
        f"{len(rows)} claim cell(s), {short} underpowered"
        + (": give them more prompts (decode.grids)" if short else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
