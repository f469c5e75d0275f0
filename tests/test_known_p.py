"""The sampled loop against the AR model's known probabilities (orthrus/audit/known_p.py): the test
keeps its level under the null, and the N it plans from a loop's exact distribution buys the power
it promises."""

import numpy as np
import torch

from orthrus.audit.known_p import planned_n, power_at, shift, surprisal_moments, z_test
from orthrus.audit.sampling import step_distribution


def _rows(seed=5, positions=3, vocab=12):
    """A target p at T = 0.5 per position, and the planted loop's exact output there (q at temperature
    1 in the ratio, as orthrus-lossy sampled does)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(positions, vocab, generator=g, dtype=torch.float64) * 1.5
    p = torch.softmax(logits / 0.5, -1)
    draft = logits + 0.3 * torch.randn(positions, vocab, generator=g, dtype=torch.float64)
    return p, step_distribution(p, torch.softmax(draft / 0.5, -1), torch.softmax(draft, -1))


def _rejections(p, r, n, trials, alpha, rng):
    """How often the z-test rejects at level alpha, n samples of the positions drawn from r."""
    pn, rn = p.numpy(), (r / r.sum(-1, keepdim=True)).numpy()
    h, v = (x.numpy() for x in surprisal_moments(p))
    out = 0
    for _ in range(trials):
        tok = np.stack([rng.choice(len(rn[j]), size=n, p=rn[j]) for j in range(len(rn))], 1)
        s = -np.log(pn[np.arange(len(pn)), tok])
        out += z_test(s.ravel(), np.tile(h, n), np.tile(v, n))[1] < alpha
    return out / trials


def test_surprisal_moments_of_a_known_distribution():
    h, v = surprisal_moments(torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]))
    assert torch.allclose(h, torch.tensor([np.log(2), 0.0], dtype=torch.float64))
    assert torch.allclose(v, torch.zeros(2, dtype=torch.float64))  # fair coin: every surprisal is log 2
    assert z_test(np.zeros(4), np.zeros(4), np.zeros(4)) == (0.0, 1.0)  # nothing uncertain, nothing to test


def test_the_level_holds_under_the_null():
    p, _ = _rows()
    rate = _rejections(p, p, 200, 400, 0.05, np.random.default_rng(0))
    assert 0.02 <= rate <= 0.09  # 0.05 +- 2.5 standard errors of 400 trials


def test_the_planned_n_buys_the_planned_power():
    """At the N planned for 0.95, the planted loop is rejected about 95% of the time; at a quarter of
    it, about as often as power_at says (the estimate the audit's plan reports)."""
    p, r = _rows()
    delta, v0, v1 = shift(p, r)
    assert delta < 0  # the planted ratio sharpens: its samples are less surprising than p's
    alpha = 0.05 / 2  # Holm's first step over two prompts
    n = int(np.ceil(planned_n(delta, v0, v1, alpha, 0.95)))
    assert 10 < n < 2000
    rng = np.random.default_rng(1)
    assert _rejections(p, r, n, 300, alpha, rng) >= 0.9
    quarter = power_at(n // 4, delta, v0, v1, alpha)
    assert 0.2 < quarter < 0.8 and abs(_rejections(p, r, n // 4, 300, alpha, rng) - quarter) < 0.12
    assert shift(p, p)[0] == 0.0 or abs(shift(p, p)[0]) < 1e-12  # the honest loop does not move it
