import itertools
import random

import numpy as np
import pytest
import torch

from orthrus.audit.distributions import step_distribution, total_variation, tv_summary
from orthrus.audit.two_sample import END, chi2_homogeneity, holm, stratified_chi2, two_sample_test

V, K = 3, 3  # a vocabulary of 3 tokens, a block of K - 1 = 2 drafts and the bonus


def _table(seed, depth):
    """A toy target model in fp64: p(. | prefix) for every prefix up to `depth` tokens, random."""
    g = torch.Generator().manual_seed(seed)
    return {
        pre: torch.softmax(torch.randn(V, generator=g, dtype=torch.float64) * 2, -1)
        for d in range(depth + 1)
        for pre in itertools.product(range(V), repeat=d)
    }


def _ar_joint(p, length):
    return {
        s: float(np.prod([p[s[:i]][s[i]] for i in range(length)])) for s in itertools.product(range(V), repeat=length)
    }


def _speculative_joint(p, q, length):
    """Brute force: enumerate every draft of one Orthrus step (slot i's draft from q[i],
    independent, as the diffusion view proposes), every accept/reject outcome and every residual
    draw, and complete the emitted tokens to `length` with exact AR draws: the probability of
    each length-`length` sequence, each path's weight a product of fp64 factors."""
    out = {}

    def finish(seq, weight):
        if len(seq) >= length:
            out[seq[:length]] = out.get(seq[:length], 0.0) + weight
            return
        for y in range(V):
            finish(seq + (y,), weight * float(p[seq][y]))

    for draft in itertools.product(range(V), repeat=K - 1):
        w = float(np.prod([q[i][d] for i, d in enumerate(draft)]))
        seq = ()
        for i, d in enumerate(draft):
            pi, qi = p[seq], q[i]
            a = min(1.0, float(pi[d] / qi[d]))
            residual = (pi - qi).clamp_min(0)
            for y in range(V):  # rejected at slot i: the residual's token ends the step
                finish(seq + (y,), w * (1 - a) * float(residual[y] / residual.sum()))
            w *= a
            seq = seq + (d,)
        for y in range(V):  # every draft accepted: the bonus token from p
            finish(seq + (y,), w * float(p[seq][y]))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_speculative_step_by_enumeration_is_the_ar_distribution_in_fp64(seed):
    p = _table(seed, K + 1)
    g = torch.Generator().manual_seed(100 + seed)
    q = [torch.softmax(torch.randn(V, generator=g, dtype=torch.float64), -1) for _ in range(K - 1)]
    spec, ar = _speculative_joint(p, q, K + 1), _ar_joint(p, K + 1)
    assert sum(spec.values()) == pytest.approx(1.0, abs=1e-14)
    assert max(abs(spec[s] - ar[s]) for s in ar) < 1e-15
    # the closed form, row by row: min(p, q) + (1 - sum min(p, q)) normalize(max(0, p - q)) is p
    for i in range(K - 1):
        pre = (0,) * i
        assert torch.allclose(step_distribution(p[pre], q[i]), p[pre], atol=1e-15, rtol=0)  # fp64 rounding only


def test_step_distribution_of_a_planted_ratio_is_not_p():
    g = torch.Generator().manual_seed(1)
    logits_p, logits_q = (
        torch.randn(8, generator=g, dtype=torch.float64),
        torch.randn(8, generator=g, dtype=torch.float64),
    )
    p, q = torch.softmax(logits_p / 0.7, -1), torch.softmax(logits_q / 0.7, -1)
    q1 = torch.softmax(logits_q, -1)  # q at temperature 1 in the ratio and the residual
    assert float(total_variation(step_distribution(p, q), p)) < 1e-15
    assert float(total_variation(step_distribution(p, q, q1), p)) > 1e-2
    # a one-hot draft (prompt lookup): the step emits p
    onehot = torch.zeros(8, dtype=torch.float64)
    onehot[3] = 1
    assert torch.allclose(step_distribution(p, onehot), p, atol=1e-16, rtol=0)
    # q without support where p has some (top-p applied to the draft only): nothing is lost either
    q_cut = q.clone()
    q_cut[q_cut < q_cut.max()] = 0
    q_cut /= q_cut.sum()
    assert torch.allclose(step_distribution(p, q_cut), p, atol=1e-15, rtol=0)


def test_step_distribution_equals_consensus_by_monte_carlo():
    """The closed form describes `consensus` as written: 20,000 one-draft steps of the loop's own
    function against it (chi-square), for a fair and a planted ratio."""
    from orthrus.decode.loop import Sampler, consensus

    g = torch.Generator().manual_seed(3)
    verify, draft_logits = torch.randn(2, 6, generator=g), torch.randn(1, 6, generator=g)
    sampler = Sampler(0.5, generator=torch.Generator().manual_seed(4))
    p, q = sampler.probs(verify), sampler.probs(draft_logits)
    q1 = Sampler(1.0).probs(draft_logits)
    from scipy.stats import chisquare

    for ratio_temperature, q_ratio in ((None, None), (1.0, q1[0])):
        expected = step_distribution(p[0], q[0], q_ratio).numpy()
        counts = np.zeros(6)
        for _ in range(20_000):
            draft = sampler.sample(q)
            n, nxt = consensus(draft, draft_logits, verify, sampler, ratio_temperature=ratio_temperature)
            counts[int(draft[0]) if n else int(nxt)] += 1
        assert chisquare(counts, expected * counts.sum()).pvalue > 1e-3
    assert float(total_variation(step_distribution(p[0], q[0], q1[0]), p[0])) > 0.01  # the planted one is biased


def test_tv_summary_bounds():
    s = tv_summary([np.array([0.1, 0.0, 0.2]), np.array([0.05])], length=10)
    assert s["n_positions"] == 4 and s["tv_max"] == pytest.approx(0.2)
    assert s["seq_bound"] == pytest.approx((0.3 + 0.05) / 2)
    assert s["bound_at_length"] == pytest.approx(0.35 / 4 * 10)
    assert tv_summary([np.array([0.9, 0.9])], length=128)["seq_bound"] == 1.0


def test_chi2_pools_rare_labels_and_sees_a_shift():
    rng = random.Random(0)
    a = [rng.choice("aab") for _ in range(400)]
    b = [rng.choice("abb") for _ in range(400)]
    assert chi2_homogeneity(a, b)[2] < 1e-6
    stat, dof, p = chi2_homogeneity(list("x" * 50 + "yz"), list("x" * 50 + "w"))
    assert dof == 0 and p == 1.0  # the rare labels merged into one category too small to test


def _sampler(probs, rng):
    labels = list(range(len(probs)))
    return lambda: rng.choices(labels, probs)[0]


def _sequences(first, second, n, rng):
    """n samples of two tokens: the first from `first`, the second from `second[first]`."""
    out = []
    for _ in range(n):
        x = rng.choices(range(len(first)), first)[0]
        out.append([x, rng.choices(range(len(second[x])), second[x])[0]])
    return out


def test_two_sample_level_on_a_fair_case():
    """Both arms from one distribution: the per-prompt test rejects at most at its level."""
    rng = random.Random(7)
    first = [0.5, 0.3, 0.15, 0.05]
    second = [[0.6, 0.4, 0, 0], [0.2, 0.2, 0.3, 0.3], [0.25] * 4, [0.1, 0.1, 0.1, 0.7]]
    trials, alpha = 300, 0.05
    rejected = sum(
        two_sample_test(_sequences(first, second, 150, rng), _sequences(first, second, 150, rng), 2)["p_value"] < alpha
        for _ in range(trials)
    )
    assert rejected / trials <= alpha


def test_two_sample_power_on_the_planted_bias():
    """The planted ratio (q at temperature 1 while p is at T = 0.5) on the second token, a TV of
    about 0.1 per row over 12 tokens: at N = 600 per arm the test rejects nearly always (at 300,
    about half the time: the power the study's N buys is measured on the model, not assumed)."""
    rng = random.Random(8)
    g = torch.Generator().manual_seed(5)
    first = [0.5, 0.3, 0.2]
    logits = torch.randn(3, 12, generator=g, dtype=torch.float64) * 1.5
    p = torch.softmax(logits / 0.5, -1)
    draft_logits = logits + 0.3 * torch.randn(3, 12, generator=g, dtype=torch.float64)
    biased = step_distribution(p, torch.softmax(draft_logits / 0.5, -1), torch.softmax(draft_logits, -1))
    tv = total_variation(biased, p)
    assert float(tv.min()) > 0.08
    trials = 30
    rejected = sum(
        two_sample_test(_sequences(first, biased.tolist(), 600, rng), _sequences(first, p.tolist(), 600, rng), 2)[
            "p_value"
        ]
        < 0.05
        for _ in range(trials)
    )
    assert rejected / trials >= 0.8


def test_end_padding_and_holm():
    r = two_sample_test([[1, 2]] * 30 + [[1]] * 30, [[1, 2]] * 60, 2)
    assert r["p_positions"][0] == 1.0 and r["p_positions"][1] < 1e-6  # an early stop is a label too (END)
    assert END == -1
    assert holm([0.01, 0.04, 0.03], 0.05) == [True, False, False]
    assert holm([0.001, 0.02, 0.04], 0.05) == [True, True, True]


def test_teacher_forced_tv_is_rounding_in_fp32_and_large_for_the_planted_ratio():
    """On a tiny Orthrus whose drafts are a noisy AR view: the honest loop's per-position TV against
    single steps is fp32 rounding, the planted control's orders of magnitude above it; every
    generated position past the first gets a row, as the loop's blocks cover them."""
    from helpers import teacher_and_orthrus

    from orthrus.audit.distributions import position_tvs, reference_trajectory, verify_rows
    from orthrus.decode.loop import Sampler
    from orthrus.options import DecodeOptions

    _, model = teacher_and_orthrus(0, shift=2.0, block_size=4)
    options = DecodeOptions(temperature=0.7, max_new_tokens=20, eos="config")
    ids = torch.tensor([5, 9, 17, 3])
    tokens, single = reference_trajectory(model, ids, options, torch.Generator().manual_seed(0))
    rows = verify_rows(model, ids, tokens, options)
    assert [r[0] for r in rows] == list(range(1, len(tokens)))
    sampler = Sampler(0.7)
    honest, planted = position_tvs(single, rows, sampler), position_tvs(single, rows, sampler, planted=True)
    assert honest.max() < 1e-5
    assert planted.mean() > 100 * max(honest.mean(), 1e-9)


def test_sampling_config_problems_name_the_key():
    from orthrus.errors import ConfigError
    from orthrus.plan.study_config import load

    def problems(cfg):  # the sampling section on a minimal study (the tiny teacher's defaults)
        try:
            load(
                values={"teacher": {}, "prompts": {}, "corpus": {}, "decode": {}, "models": {"m": {"max_steps": 200}}}
                | cfg
            )
        except ConfigError as e:
            return e.problems
        return []

    sampling = {"enabled": True, "model": "x"}
    assert any(p.startswith("sampling.model:") for p in problems({"sampling": sampling}))
    sampling |= {"model": "m", "two_sample": {"enabled": True, "temperature": 1.0}}
    assert any(p.startswith("sampling.two_sample.temperature:") for p in problems({"sampling": sampling}))
    assert any(p.startswith("sampling.temperatures[0]:") for p in problems({"sampling": {"temperatures": [0, 0.7]}}))
    assert problems({"sampling": {"enabled": False, "model": "x"}}) == []


def test_the_sampling_commands_read_their_section_with_its_model(tmp_path, capsys):
    """`orthrus sampling measure --config` and `export-prompts --sampling` read the sampling audit's own section
    (orthrus/audit/settings.py): what the workflow hands the job is that section whole, a key left out takes its
    default, and a misspelt or foreign key is refused by name before any model loads."""
    import json

    from helpers import study

    from orthrus.audit.sampling_cli import _settings
    from orthrus.audit.sampling_cli import main as sampling
    from orthrus.cli import main as cli
    from orthrus.errors import InputError
    from orthrus.plan import Study

    config = study({"sampling": {"seed": 4, "two_sample": {"m": 3}}})
    handed = json.loads(Study(config).sampling.audit_settings())
    assert _settings(json.dumps(handed)).model_dump() == handed
    assert (handed["seed"], handed["two_sample"]["m"]) == (4, 3)
    read = _settings('{"two_sample": {"m": 3}}')  # the rest at the defaults the study's config shows
    assert (read.seed, read.two_sample.n_samples, read.temperatures) == (0, 300, [0.7, 1.0])
    missing = str(tmp_path / "no-model")
    args = ["--model-path", missing, "--model-name", "m", "--prompts", missing, "--options", "{}"]
    args += ["--out-tv", missing, "--out-two-sample", missing]
    with pytest.raises(InputError, match=r"two_sample\.n_sample: unknown key"):
        sampling(["measure", *args, "--config", '{"two_sample": {"n_sample": 50}}'])
    with pytest.raises(InputError, match=r"engines: unknown key"):  # the plan's key, not the job's
        sampling(["measure", *args, "--config", '{"engines": {}}'])
    with pytest.raises(InputError, match=r"bad --config \(the sampling section\): not JSON"):
        sampling(["measure", *args, "--config", "{seed: 1"])
    export = ["export-prompts", "--model-path", missing, "--prompts", missing, "--options", "{}", "--out", missing]
    assert cli([*export, "--sampling", '{"temperatur": 0.7}']) == 2
    assert "bad --sampling (sampling.two_sample): temperatur: unknown key" in capsys.readouterr().err


def _measured(tmp_path, planted_rejected=True, fp32_tv=2e-6):
    """Measurement rows as `orthrus sampling measure` writes them, summarised by `orthrus sampling table`."""
    import pandas as pd

    from orthrus.audit.sampling_cli import main

    rows, tests = [], []
    for precision, scale in (("bf16", 1e-3), ("fp32", fp32_tv)):
        for t in (0.7, 1.0):
            for decoder in ("orthrus", "orthrus-lossy"):
                tv = scale if decoder == "orthrus" or t == 1.0 else 0.02
                rows.append(
                    {
                        "model": "m",
                        "decoder": decoder,
                        "precision": precision,
                        "attention": "sdpa",
                        "temperature": t,
                        "top_p": 1.0,
                        "prompt_id": "a-0",
                        "domain": "a",
                        "n_tokens": 5,
                        "tv": [tv, tv / 2, 0.0, tv],
                        "env": "{}",
                    }
                )
    for decoder, p in (("orthrus", 0.4), ("orthrus-lossy", 1e-5 if planted_rejected else 0.3)):
        for i in range(4):
            tests.append(
                {
                    "model": "m",
                    "decoder": decoder,
                    "precision": "fp32",
                    "attention": "sdpa",
                    "temperature": 0.5,
                    "top_p": 1.0,
                    "prompt_id": f"a-{i}",
                    "domain": "a",
                    "n_samples": 300,
                    "m": 6,
                    "p_positions": [p] * 6,
                    "p_prefix": p,
                    "p_value": min(1.0, 7 * p),
                    "samples": [[1]],
                    "ar_samples": [[1]],
                    "seconds": 1.0,
                    "env": "{}",
                }
            )
    pd.DataFrame(rows).to_parquet(tmp_path / "tv.parquet")
    pd.DataFrame(tests).to_parquet(tmp_path / "ts.parquet")
    tables = tmp_path / "tables"
    tables.mkdir()
    assert (
        main(
            [
                "table",
                "--tv",
                str(tmp_path / "tv.parquet"),
                "--two-sample",
                str(tmp_path / "ts.parquet"),
                "--length",
                "128",
                "--out-tv",
                str(tables / "sampling_tv.csv"),
                "--out-two-sample",
                str(tables / "sampling_two_sample.csv"),
                "--figure",
                str(tmp_path / "fig"),
            ]
        )
        == 0
    )
    assert (tmp_path / "fig.png").exists()
    return tables


def test_sampling_tables_and_claims(tmp_path):
    import pandas as pd

    from orthrus import contracts
    from orthrus.report.claims import Settings, planted_sampler_bias_caught, sampling_lossless_fp32, sampling_tv_bf16

    tables = _measured(tmp_path)
    tv = pd.read_csv(tables / "sampling_tv.csv")
    assert list(tv.columns) == contracts.SAMPLING_TABLES["sampling_tv.csv"]
    cell = tv[(tv.decoder == "orthrus") & (tv.precision == "bf16") & (tv.temperature == 0.7)].iloc[0]
    assert cell.tv_mean == pytest.approx(0.625e-3) and cell.tv_max == pytest.approx(1e-3)
    assert cell.bound_at_length == pytest.approx(0.625e-3 * 128) and cell.seq_bound == pytest.approx(2.5e-3)
    ts = pd.read_csv(tables / "sampling_two_sample.csv")
    assert list(ts.columns) == contracts.SAMPLING_TABLES["sampling_two_sample.csv"]
    assert ts[ts.decoder == "orthrus-lossy"].rejected.all() and not ts[ts.decoder == "orthrus"].rejected.any()
    s = Settings()
    assert [r["verdict"] for r in sampling_lossless_fp32(tables, s)] == ["holds"]
    bf16 = sampling_tv_bf16(tables, s)
    assert [r["verdict"] for r in bf16] == ["holds", "holds"] and "128-token response" in bf16[0]["reason"]
    assert [r["verdict"] for r in planted_sampler_bias_caught(tables, s)] == ["holds"]


def test_sampling_claims_fail_when_they_should(tmp_path):
    from orthrus.report.claims import Settings, planted_sampler_bias_caught, sampling_lossless_fp32

    (tmp_path / "a").mkdir()
    tables = _measured(tmp_path / "a", planted_rejected=False, fp32_tv=1e-3)
    s = Settings()
    assert [r["verdict"] for r in sampling_lossless_fp32(tables, s)] == ["fails"]  # an fp32 TV above rounding
    assert [r["verdict"] for r in planted_sampler_bias_caught(tables, s)] == ["fails"]  # not rejected
    (tmp_path / "empty").mkdir()
    assert [r["verdict"] for r in planted_sampler_bias_caught(tmp_path / "empty", s)] == ["untestable"]


def test_the_stratified_test_compares_each_token_after_the_same_earlier_tokens():
    """Arm a repeats its first token, arm b flips it: every position's marginal is the same in both
    (so the per-position tests see nothing), the conditional distributions differ wholly."""
    rng = random.Random(4)
    firsts = [rng.randrange(2) for _ in range(200)]
    a, b = [[x, x] for x in firsts[:100]], [[x, 1 - x] for x in firsts[100:]]
    r = two_sample_test(a, b, 2)
    assert min(r["p_positions"]) > 0.01 and r["p_value"] < 1e-10
    stat, dof, p = stratified_chi2([tuple(s) for s in a], [tuple(s) for s in a[::-1]], 2)
    assert p == 1.0 or p > 0.5  # an arm against itself
    assert stratified_chi2([(1, END)] * 5, [(1, END)] * 4, 2)[1] == 0  # strata under 10 samples say nothing
