"""The sampled loop against the AR model's known probabilities (orthrus/audit/known_p.py): the test
keeps its level under the null, sees a token the AR sampler never draws, and the power it plans from a
loop's exact distribution is the power it has."""

import numpy as np
import pytest
import torch

from orthrus.audit.distributions import step_distribution
from orthrus.audit.known_p import categories, gof, power_at, strata, stratified_gof


def _row(seed=5, vocab=12):
    """A target p at T = 0.5, and the planted loop's exact output for it (q at temperature 1 in the
    ratio, as orthrus-lossy sampled does)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, generator=g, dtype=torch.float64) * 1.5
    p = torch.softmax(logits / 0.5, -1)
    draft = logits + 0.3 * torch.randn(vocab, generator=g, dtype=torch.float64)
    r = step_distribution(p[None], torch.softmax(draft / 0.5, -1)[None], torch.softmax(draft, -1)[None])[0]
    return p.numpy(), (r / r.sum()).numpy()


def _rejections(p, r, n, trials, alpha, rng):
    """How often the test of n one-token samples drawn from r rejects p at level alpha."""
    return np.mean(
        [stratified_gof({(): list(rng.choice(len(r), size=n, p=r))}, {(): p})[2] < alpha for _ in range(trials)]
    )


def test_rare_tokens_are_pooled_and_an_impossible_token_rejects():
    group, k = categories(np.array([50.0, 30.0, 3.0, 2.0, 0.0]))
    assert k == 3 and group.tolist() == [0, 1, 2, 2, 2]  # the three rare ones pooled (expected 5)
    group, k = categories(np.array([50.0, 30.0, 3.0]))
    assert k == 2 and group.tolist() == [0, 1, 1]  # a pool still too rare joins the smallest other
    p = np.array([0.5, 0.5, 0.0])
    assert gof([0] * 10 + [1] * 10, p)[0] == 0.0
    stat, dof = gof([0] * 10 + [1] * 9 + [2], np.array([0.5, 0.45, 0.05]))
    assert (stat, dof) == (0.0, 1)  # token 2 pooled with token 1: 10 seen where 10 expected
    assert gof([0] * 19 + [2], np.array([0.6, 0.4, 0.0]))[0] == np.inf  # a token p never draws: impossible
    assert stratified_gof({(): [0] * 19 + [2]}, {(): np.array([0.6, 0.4, 0.0])})[2] == 0.0


def test_strata_group_samples_by_the_tokens_before():
    samples = [[1, 2, 3]] * 6 + [[1, 4]] * 5 + [[7]] * 10
    got = strata(samples, 3, min_stratum=5)
    assert got == {(): [1] * 11 + [7] * 10, (1,): [2] * 6 + [4] * 5, (1, 2): [3] * 6}


def test_the_level_holds_under_the_null():
    p, _ = _row()
    rate = _rejections(p, p, 200, 400, 0.05, np.random.default_rng(0))
    assert 0.02 <= rate <= 0.09  # 0.05 +- 2.5 standard errors of 400 trials


def test_the_planned_power_is_the_power():
    """One position whose loop distribution is known: power_at predicts the rejection rate at two N
    (the noncentral chi-square of the plan), and at the N it asks for the planted loop is caught."""
    p, r = _row()
    alpha = 0.05 / 2  # Holm's first step over two prompts
    path = [[(1.0, r, p)]]
    assert power_at(400, [[(1.0, p, p)]], alpha) == pytest.approx(alpha)  # the honest loop: nothing to find
    rng = np.random.default_rng(1)
    for n in (120, 250):
        planned = power_at(n, path, alpha)
        assert 0.2 < planned < 0.98
        assert abs(_rejections(p, r, n, 300, alpha, rng) - planned) < 0.1
    n = next(n for n in range(10, 2000, 10) if power_at(n, path, alpha) >= 0.95)
    assert _rejections(p, r, n, 300, alpha, rng) >= 0.9


def test_the_plan_runs_the_planted_loop_of_a_tiny_orthrus():
    """`orthrus sampling plan`'s work on a tiny Orthrus whose drafts are a noisy AR view: per prompt a
    power at each N, at least the level, growing with N to near certainty where the planted ratio moves
    the loop's rows; the honest loop's rows (r = p) would give the level alone."""
    import pandas as pd
    from helpers import teacher_and_orthrus, word_tokenizer

    from orthrus.audit.known_p import plan_table
    from orthrus.audit.settings import TwoSample
    from orthrus.options import DecodeOptions

    _, model = teacher_and_orthrus(0, shift=2.0, block_size=4)
    prompts = pd.DataFrame({"prompt_id": ["a"], "domain": ["x"], "prompt": ["w5 w9 w17 w3"]})
    options = DecodeOptions(attention="eager", eos="config", message="none", temperature=0.5, max_new_tokens=4)
    ts = TwoSample(alpha=0.05, plan_trajectories=4)
    rows = pd.DataFrame(plan_table(model, word_tokenizer(), prompts, options, ts, 0, sizes=(20, 200, 2000)))
    assert rows["n_samples"].tolist() == [20, 200, 2000]
    power = rows["power"].tolist()
    assert 0.05 - 1e-9 <= power[0] <= power[-1] and power[-1] > 0.9
