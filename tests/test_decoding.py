import math

import numpy as np
import pytest
import torch
from helpers import EOS, MASK, tiny_base, tiny_orthrus
from scipy.stats import chi2_contingency

import orthrus
import orthrus.models.loading
from orthrus.decode.loop import Sampler
from orthrus.decoders import DECODER


def match_rate(model, prompts, max_new):
    same = 0
    accepted = []
    for i, p in enumerate(prompts):
        n = max_new[i % len(max_new)]
        ar = orthrus.generate(model, p, decoder="ar", max_new_tokens=n)
        orth = orthrus.generate(model, p, decoder="orthrus", max_new_tokens=n)
        assert len(orth.tokens) <= n
        same += torch.equal(ar.tokens, orth.tokens)
        accepted += orth.stats["accepted"]
    return same / len(prompts), float(np.mean(accepted)) if accepted else 0.0


def test_the_loop_records_no_autograd_graph():
    """A decoding run is inference: no forward of the loop records a graph, though the model's
    weights require grad (as loaded); recording one costs every forward time and memory."""
    model = tiny_orthrus(0, block_size=4)
    assert any(p.requires_grad for p in model.parameters())
    seen = []

    def trace(forward, tokens):
        seen.append(forward.logits.requires_grad or torch.is_inference_mode_enabled() is False)
        return False

    orthrus.generate(model, torch.tensor([5, 6, 7]), decoder="orthrus", max_new_tokens=12, trace=trace)
    assert seen and not any(seen)


@pytest.mark.parametrize(
    "block_size", [pytest.param(2, marks=pytest.mark.slow), 8, pytest.param(32, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("diffusion", ["random", "noisy"])
@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_fp32_orthrus_greedy_equals_ar(block_size, diffusion, family, random_prompts):
    accepted = []
    for seed in (0, 1):
        model = tiny_orthrus(seed, block_size, diffusion, peaked=3.0 if diffusion == "noisy" else 0.0, family=family)
        rate, acc = match_rate(model, random_prompts(25, seed), max_new=[13, 21, 40])
        assert rate == 1.0, f"seed {seed}: fp32 Orthrus diverged from AR"
        accepted.append(acc)
    acceptance = np.mean(accepted) / (block_size - 1)
    if diffusion == "random":
        assert acceptance < 0.1
    else:  # many steps accept several proposals, so the multi-token path is what is tested
        assert acceptance > 0.25


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bf16_orthrus_parts_from_ar_only_at_a_near_tie(attn, random_prompts, verify_kernel_noise):
    """bf16 Orthrus leaves its AR view where a verify block's bits differ from the single steps'
    (planted, `verify_kernel_noise`: at most 2^-8 of each logit, so on any CPU) and that flips a
    near-tie: at each first divergence the AR step ranks its own token first and the loop's within
    what the planted noise and one bf16 rounding can flip. A loop that emits anything else fails."""
    from orthrus.audit.forensics import stepwise
    from orthrus.stats import first_divergence

    model = tiny_orthrus(0, 8, "noisy", attn=attn, noise=1e-2, peaked=1.0, dtype=torch.bfloat16)
    prompts = random_prompts(20, 3)
    parted = 0
    for p in prompts:
        ar = orthrus.generate(model, p, decoder="ar", max_new_tokens=40).tokens.tolist()
        orth = orthrus.generate(model, p, decoder="orthrus", max_new_tokens=40).tokens.tolist()
        t = first_divergence(ar, orth)
        if t is None or t >= min(len(ar), len(orth)):
            continue
        parted += 1
        logits = stepwise(model, p.tolist(), ar[:t])[0].float()
        own, other = float(logits[ar[t]]), float(logits[orth[t]])
        ulp = 2.0 ** (math.floor(math.log2(max(abs(own), abs(other)))) - 7)
        assert int(logits.argmax()) == ar[t] and own - other <= 2.0**-8 * (abs(own) + abs(other)) + 2 * ulp, (
            t,
            own,
            other,
        )
    assert 0 < parted < len(prompts), f"{parted} of {len(prompts)} prompts parted"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_ar_mode_equals_transformers_generate(dtype, attn, random_prompts):
    base = tiny_base(0, attn).to(dtype)
    model = orthrus.OrthrusForCausalLM.from_base(base, block_size=4, mask_token_id=MASK).eval()
    for p in random_prompts(10, 5):
        ours = orthrus.generate(model, p, decoder="ar", max_new_tokens=24)
        ref = base.generate(
            p[None],
            attention_mask=torch.ones_like(p[None]),
            max_new_tokens=24,
            do_sample=False,
            eos_token_id=EOS,
            pad_token_id=EOS,
        )[0, len(p) :]
        assert ours.tokens.tolist() == ref.tolist()


def test_stats_and_tpf():
    model = tiny_orthrus(0, 8, "noisy", peaked=3.0)
    out = orthrus.generate(model, torch.tensor([5, 6, 7]), decoder="orthrus", max_new_tokens=50, eos_token_id=[])
    s = out.stats
    assert len(out.tokens) == s["n_tokens"] == 50
    assert s["n_prefill"] == 1 and s["n_verify"] >= s["n_diffusion"] and len(s["accepted"]) == s["n_diffusion"]
    # every verify step emits its accepted proposals plus one AR token; the prefill emits one
    assert 1 + sum(a + 1 for a in s["accepted"]) + (s["n_verify"] - s["n_diffusion"]) == 50
    assert s["tpf_verify"] == pytest.approx(50 / (1 + s["n_verify"]))
    assert s["tpf_all"] == pytest.approx(50 / (1 + s["n_verify"] + s["n_diffusion"]))
    assert s["tpf_verify"] > 2


def test_edge_cases():
    model = tiny_orthrus(0, 8, "noisy", peaked=3.0)
    one = torch.tensor([7])
    for mode in ("ar", "orthrus"):
        assert len(orthrus.generate(model, one, decoder=mode, max_new_tokens=5).tokens) <= 5
        out0 = orthrus.generate(model, one, decoder=mode, max_new_tokens=0)
        assert out0.tokens.numel() == 0 and out0.stats["n_prefill"] == 0
        assert len(orthrus.generate(model, one, decoder=mode, max_new_tokens=1).tokens) == 1
    # EOS as the very first token: make the prefill's argmax the EOS id
    first = orthrus.generate(model, one, decoder="ar", max_new_tokens=1).tokens[0].item()
    out = orthrus.generate(model, one, decoder="orthrus", max_new_tokens=20, eos_token_id=first)
    assert out.tokens.tolist() == [first] and out.stats["finish_reason"] == "eos" and out.stats["n_verify"] == 0
    with pytest.raises(ValueError, match="block_size"):
        orthrus.generate(model, one, decoder="orthrus", block_size=1)
    with pytest.raises(ValueError, match="block_size"):
        orthrus.OrthrusForCausalLM.from_base(tiny_base(0), block_size=1, mask_token_id=MASK)
    with pytest.raises(ValueError, match="positions"):
        orthrus.generate(model, torch.ones(300, dtype=torch.long), max_new_tokens=4)
    with pytest.raises(ValueError, match="empty prompt"):
        orthrus.generate(model, torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="decoder"):
        orthrus.generate(model, one, decoder="beam")
    # the decoder as its row of the decoder table: the same run as by its name
    by_row = orthrus.generate(model, one, decoder=DECODER["orthrus"], max_new_tokens=9)
    assert by_row.stats["decoder"] == "orthrus"
    assert by_row.tokens.tolist() == orthrus.generate(model, one, decoder="orthrus", max_new_tokens=9).tokens.tolist()


def test_eos_stops_inside_accepted_block():
    model = tiny_orthrus(0, 8, "noisy", peaked=3.0)
    ref = orthrus.generate(
        model, torch.tensor([9, 9]), decoder="ar", max_new_tokens=30, eos_token_id=[]
    ).tokens.tolist()
    eos = ref[5]
    out = orthrus.generate(
        model, torch.tensor([9, 9]), decoder="orthrus", max_new_tokens=30, eos_token_id=eos
    ).tokens.tolist()
    assert out == ref[: ref.index(eos) + 1]


def first_two_tokens(model, mode, n, seed):
    g = torch.Generator().manual_seed(seed)
    draws = []
    for _ in range(n):
        out = orthrus.generate(
            model,
            torch.tensor([3, 4]),
            decoder=mode,
            max_new_tokens=2,
            eos_token_id=[],
            temperature=1.0,
            top_k=3,
            generator=g,
        )
        draws.append(tuple(out.tokens.tolist()))
    return draws


@pytest.mark.slow
@pytest.mark.parametrize("diffusion", ["noisy", "random"])
def test_rejection_sampling_preserves_distribution(diffusion):
    """Orthrus sampling draws the second token from the AR distribution, whatever the proposals."""
    model = tiny_orthrus(0, 4, diffusion, init=0.5, noise=0.05, layers=1)
    n = 2500
    ar, orth = first_two_tokens(model, "ar", n, 1), first_two_tokens(model, "orthrus", n, 2)
    cats = sorted(set(ar) | set(orth))
    table = np.array([[ar.count(c) for c in cats], [orth.count(c) for c in cats]])
    table = table[:, table.sum(0) >= 5]
    assert table.shape[1] >= 3, "too few outcomes to test"
    p = chi2_contingency(table).pvalue
    print(f"{diffusion}: {table.shape[1]} outcomes, chi-square p = {p:.3g}")
    assert p > 1e-3


def test_sampler_top_p_keeps_smallest_nucleus():
    s = Sampler(temperature=1.0, top_p=0.6)
    probs = s.probs(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])))
    assert (probs > 0).tolist() == [True, True, False, False]
    assert probs.sum().item() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "ids, kwargs, message",
    [
        (torch.tensor([7.0, 8.0]), {}, "integer tensor"),
        (torch.tensor([True]), {}, "integer tensor"),
        ([7, 8], {}, "integer tensor"),
        (torch.tensor([7, MASK + 1]), {}, r"\[0, 96\)"),
        (torch.tensor([-1, 7]), {}, r"\[0, 96\)"),
        (torch.tensor([[7], [8]]), {}, "batch size 1"),
        (torch.tensor([7]), {"max_new_tokens": 4.5}, "max_new_tokens"),
        (torch.tensor([7]), {"max_new_tokens": -1}, "max_new_tokens"),
        (torch.tensor([7]), {"temperature": -0.5}, "temperature"),
        (torch.tensor([7]), {"temperature": float("nan")}, "temperature"),
        (torch.tensor([7]), {"temperature": 1.0, "top_p": 0}, "top_p"),
        (torch.tensor([7]), {"temperature": 1.0, "top_p": 1.5}, "top_p"),
        (torch.tensor([7]), {"temperature": 1.0, "top_k": -3}, "top_k"),
        (torch.tensor([7]), {"temperature": 1.0, "top_k": 2.5}, "top_k"),
        (torch.tensor([7]), {"block_size": 0}, "block_size"),
        (torch.tensor([7]), {"block_size": 4.0}, "block_size"),
    ],
)
def test_generate_rejects_bad_arguments_in_one_line(ids, kwargs, message):
    model = tiny_orthrus(0, 4)
    with pytest.raises(ValueError, match=message) as err:
        orthrus.generate(model, ids, **kwargs)
    assert "\n" not in str(err.value)


def test_tpf_authors_does_not_count_the_correction_token():
    assert orthrus.decode.tpf.tpf_authors([]) == 1.0
    assert orthrus.decode.tpf.tpf_authors([3, 0, 7]) == pytest.approx((1 + 10) / (1 + 3))
    model = tiny_orthrus(0, 8, "noisy", peaked=3.0)
    s = orthrus.generate(model, torch.tensor([5, 6, 7]), decoder="orthrus", max_new_tokens=50, eos_token_id=[]).stats
    assert s["tpf_authors"] == pytest.approx((1 + sum(s["accepted"])) / (1 + len(s["accepted"])))
    assert s["tpf_authors"] < s["tpf_verify"]
    # with one step fewer the budget ends on a consensus step: tpf_verify counts the step's
    # correction token, tpf_authors does not, so tpf_verify = tpf_authors + steps / (1 + steps)
    s = orthrus.generate(model, torch.tensor([5, 6, 7]), max_new_tokens=49, eos_token_id=[]).stats
    steps = len(s["accepted"])
    assert s["n_verify"] == steps and s["tpf_verify"] == pytest.approx(s["tpf_authors"] + steps / (1 + steps))


def test_tokens_per_forward_is_one_function_for_generate_and_the_tpf_table():
    """generate's stats and orthrus analyze's per-prompt TPF come from the same counts through
    the same function, and agree to the bit."""
    import math

    import pandas as pd

    from orthrus.analysis.tpf import tpf_per_prompt
    from orthrus.decode.tpf import tokens_per_forward

    t = tokens_per_forward(24, 1, 5, 5, [3, 4, 5, 6, 1])
    assert t == {"tpf_verify": 24 / 6, "tpf_all": 24 / 11, "tpf_authors": (1 + 19) / 6}
    assert math.isnan(tokens_per_forward(24, 1, 5, 5)["tpf_authors"])  # no accepted lengths: not Orthrus's loop
    assert all(math.isnan(v) for v in tokens_per_forward(0, 0, 0, 0, []).values())
    assert tokens_per_forward(0, 0, 0, 0, [], undefined=0.0) == dict.fromkeys(
        ("tpf_verify", "tpf_all", "tpf_authors"), 0.0
    )
    model = tiny_orthrus(0, 8, "noisy", peaked=3.0)
    rows = []
    for mode, n in (("orthrus", 50), ("orthrus", 49), ("ar", 20), ("orthrus", 0)):
        out = orthrus.generate(model, torch.tensor([5, 6, 7]), decoder=mode, max_new_tokens=n, eos_token_id=[])
        s = out.stats
        rows.append(
            dict(
                decoder="orthrus",
                tokens=out.tokens.tolist(),
                n_prefill=s["n_prefill"],
                n_diffusion=s["n_diffusion"],
                n_verify=s["n_verify"],
                accepted=s["accepted"],
                stats=s,
            )
        )
    table = tpf_per_prompt(pd.DataFrame(rows))
    for r, (_, t) in zip(rows, table.iterrows()):
        for col in ("tpf_verify", "tpf_all", "tpf_authors"):
            # generate reports 0.0 where nothing was decoded, the table NaN
            assert r["stats"][col] == (0.0 if math.isnan(t[col]) else t[col]), (col, r["stats"][col], t[col])
    assert rows[-1]["stats"]["tpf_verify"] == 0.0


def test_eos_policies_config_vs_generation_config():
    """A model whose generation_config lists a second EOS id that the trajectory emits: the
    `generation_config` policy stops there, the `config` policy (the released loop) goes on."""
    model = tiny_orthrus(0, 8, "noisy", peaked=3.0)
    free = orthrus.generate(
        model, torch.tensor([9, 9]), decoder="orthrus", max_new_tokens=30, eos_token_id=[]
    ).tokens.tolist()
    second = next(t for t in free[3:] if t != EOS)
    model.config.eos_token_id = EOS
    model.generation_config.eos_token_id = [EOS, second]
    assert orthrus.models.loading.eos_ids(model, "config") == [EOS]
    by_gen = orthrus.generate(model, torch.tensor([9, 9]), max_new_tokens=30).tokens.tolist()
    by_cfg = orthrus.generate(model, torch.tensor([9, 9]), max_new_tokens=30, eos="config").tokens.tolist()
    assert by_gen == free[: free.index(second) + 1]
    assert by_cfg == (free[: free.index(EOS) + 1] if EOS in free else free) and len(by_cfg) > len(by_gen)
    with pytest.raises(ValueError, match="option eos must be one of"):
        orthrus.generate(model, torch.tensor([9]), eos="tokenizer")


@pytest.mark.parametrize("budget", [1, 2, 5, 9, 23])
def test_last_block_shortening_and_prefill_logits_keep_fp32_exact(budget, random_prompts):
    model = tiny_orthrus(0, 8, "noisy", peaked=3.0)
    calls = []
    forward = model.diffusion_forward
    model.diffusion_forward = lambda ids, *a, **k: calls.append(ids.shape[1]) or forward(ids, *a, **k)
    for p in random_prompts(4, budget):
        ar = orthrus.generate(model, p, decoder="ar", max_new_tokens=budget, eos_token_id=[]).tokens
        calls.clear()
        full = orthrus.generate(model, p, max_new_tokens=budget, eos_token_id=[])
        assert set(calls) <= {8}
        calls.clear()
        short = orthrus.generate(
            model, p, max_new_tokens=budget, eos_token_id=[], last_block="shorten", prefill_logits="all"
        )
        # the reference loop: blocks of min(K, remaining + 1) tokens (none when the prefill's
        # token is the whole budget); the first block follows the prefill's one token
        assert calls[:1] == ([min(8, budget)] if budget > 1 else []) and max(calls, default=0) <= 8
        assert torch.equal(ar, full.tokens) and torch.equal(ar, short.tokens) and len(short.tokens) == budget
    with pytest.raises(ValueError, match="last_block"):
        orthrus.generate(model, random_prompts(1)[0], last_block="trim")


def test_generate_names_a_missing_model_a_plain_model_and_a_float_eos():
    from orthrus.options import OptionsError

    ids = torch.tensor([5, 6])
    with pytest.raises(OptionsError, match="model must be a loaded causal LM"):
        orthrus.generate(None, ids)
    with pytest.raises(OptionsError, match="decoder orthrus needs an Orthrus model"):
        orthrus.generate(tiny_base(0), ids)
    assert len(orthrus.generate(tiny_base(0), ids, decoder="ar", max_new_tokens=3).tokens) <= 3  # its AR loop runs
    with pytest.raises(OptionsError, match="eos_token_id must be an int or a list of ints"):
        orthrus.generate(tiny_orthrus(0, 4), ids, eos_token_id=3.5)
