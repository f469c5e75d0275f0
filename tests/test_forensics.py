from pathlib import Path

import pytest
import torch
import yaml
from helpers import tiny_orthrus

import orthrus
from orthrus.audit.forensics import replay_verify, stepwise, stepwise_at
from orthrus.options import DecodeOptions
from orthrus.stats import first_divergence

ROOT = Path(__file__).resolve().parent.parent


def test_replay_reproduces_the_run_at_every_divergence(verify_kernel_noise):
    """The replayed verify row picks the token Orthrus emitted; the stepwise row the AR token (the
    verify blocks part from single steps by a planted kernel difference, so on any CPU)."""
    model = tiny_orthrus(0, 8, "noisy", attn="sdpa", noise=1e-2, peaked=1.0, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(4)
    checked = 0
    opts = DecodeOptions(decoder="orthrus", precision="bf16", attention="sdpa", max_new_tokens=40)
    for _ in range(150):
        prompt = torch.randint(2, 90, (6,), generator=g).tolist()
        ar = orthrus.generate(model, torch.tensor(prompt), opts, decoder="ar").tokens.tolist()
        orth = orthrus.generate(model, torch.tensor(prompt), opts).tokens.tolist()
        t = first_divergence(ar, orth)
        if t is None or t >= min(len(ar), len(orth)):
            continue
        step_logits, step_hidden = stepwise(model, prompt, ar[:t])
        ver_logits, ver_hidden, replayed, _ = replay_verify(model, prompt, opts, t)
        assert int(step_logits.argmax()) == ar[t]
        assert int(ver_logits.argmax()) == orth[t] and replayed == orth[: t + 1]
        assert len(step_hidden) == len(ver_hidden) == model.config.num_hidden_layers + 1
        checked += 1
        if checked == 4:
            break
    assert checked >= 3, f"only {checked} of the fixture's prompts parted"


def test_replay_equals_stepwise_in_fp32_on_matching_run():
    model = tiny_orthrus(1, 4, "noisy", peaked=3.0)
    prompt = [5, 6, 7]
    opts = DecodeOptions(max_new_tokens=20)
    toks = orthrus.generate(model, torch.tensor(prompt), opts).tokens.tolist()
    for t in range(1, len(toks)):
        a, _ = stepwise(model, prompt, toks[:t])
        b, _, _, _ = replay_verify(model, prompt, opts, t)
        assert int(a.argmax()) == int(b.argmax()) == toks[t]
        assert torch.allclose(a, b, atol=1e-4)


def test_one_stepwise_pass_serves_every_divergence_of_a_prompt():
    """forensics computes the reference's steps once per prompt, at every position some decoder
    parted: each row is bit for bit the one a pass stopped there computes (bf16, where any other
    order of the sums would show)."""
    model = tiny_orthrus(0, 8, "noisy", attn="sdpa", noise=1e-2, peaked=1.0, dtype=torch.bfloat16)
    prompt, tokens = [5, 6, 7, 8], torch.randint(2, 90, (24,), generator=torch.Generator().manual_seed(1)).tolist()
    shared = stepwise_at(model, prompt, tokens, [0, 3, 17, 24])
    assert sorted(shared) == [0, 3, 17, 24]
    for t, (logits, hidden) in shared.items():
        alone, alone_hidden = stepwise(model, prompt, tokens[:t])
        assert torch.equal(logits, alone) and all(torch.equal(a, b) for a, b in zip(hidden, alone_hidden))


def test_forensics_of_a_transformers_decoder_records_the_reference_margins(tmp_path):
    """For assisted / prompt-lookup files the model is the teacher: margins in its own precision
    and in fp32 at the first divergence; the Orthrus block replay columns stay empty. A row the
    decoder did not produce (a token planted by hand) is not reproduced by its replay, and gets
    no verdict."""
    import pandas as pd
    from helpers import MASK, save_tiny, tiny_base

    from orthrus.audit.forensics import main as forensics
    from orthrus.decode.stage import main as decode

    save_tiny(tmp_path, {"teacher": tiny_base(0)}, {"a": ("x", "w5 w6 w7"), "b": ("y", "w9 w3")})
    assert (
        decode(
            [
                "--decoder",
                "ar-ref",
                "--model-path",
                str(tmp_path / "teacher"),
                "--model-name",
                "teacher",
                "--precision",
                "bf16",
                "--attention",
                "sdpa",
                "--prompts",
                str(tmp_path / "p.parquet"),
                "--max-new-tokens",
                "12",
                "--no-progress",
                "--out",
                str(tmp_path / "ref.parquet"),
            ]
        )
        == 0
    )
    ref = pd.read_parquet(tmp_path / "ref.parquet")
    import json

    env = json.loads(ref.env[0])
    env["options"]["decoder"] = "prompt-lookup"  # the planted decoder's rows say what they are
    fake = ref.assign(decoder="prompt-lookup", env=json.dumps(env))
    fake.at[0, "tokens"] = [*ref.tokens[0][:3], (int(ref.tokens[0][3]) + 1) % MASK, *ref.tokens[0][4:]]
    fake.to_parquet(tmp_path / "lookup.parquet")
    assert (
        forensics(
            [
                "--model-path",
                str(tmp_path / "teacher"),
                "--prompts",
                str(tmp_path / "p.parquet"),
                "--decoded",
                str(tmp_path / "lookup.parquet"),
                "--reference",
                str(tmp_path / "ref.parquet"),
                "--out",
                str(tmp_path / "fx.parquet"),
            ]
        )
        == 0
    )
    fx = pd.read_parquet(tmp_path / "fx.parquet")
    assert len(fx) == 1 and fx.decoder.iloc[0] == "prompt-lookup" and fx.position.iloc[0] == 3
    r = fx.iloc[0]
    # the margins are the reference's at the divergence: recomputed here in fp32 by one forward of the
    # prompt and the reference's first three tokens (a block, not steps: equal to about 1e-5), and the
    # bf16 steps' within bf16's rounding of it
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orthrus.chat import render_chat

    path = tmp_path / "teacher"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    prompt = render_chat(AutoTokenizer.from_pretrained(path), pd.read_parquet(tmp_path / "p.parquet").prompt[0])
    with torch.inference_mode():
        logits = model(torch.tensor([[*prompt, *ref.tokens[0][:3]]])).logits[0, -1]
    top = torch.topk(logits, 2).values
    expected = float(top[0] - top[1])
    assert r.margin_fp32 == pytest.approx(expected, rel=1e-3, abs=1e-4), (r.margin_fp32, expected)
    assert r.margin_native == pytest.approx(expected, rel=0.05, abs=0.05), (r.margin_native, expected)
    assert not r.replay_consistent
    assert r.verify_margin >= 0 and pd.isna(r.first_layer_diverging) and len(r.max_abs_hidden_diff) == 0
    assert r.verdict is None and "does not reproduce" in r.verdict_note


def _config_options():
    """(name, options) of every decoding setting the default, smoke and paper configs run through
    the Orthrus loop: decode's, and tpf's on top of it where a TPF run is enabled."""
    out = []
    for path in (ROOT / "config.yaml", ROOT / "tests/smoke/config.yaml", ROOT / "configs/paper.yaml"):
        cfg = yaml.safe_load(path.read_text())
        sections = {"decode": cfg["decode"]}
        if cfg.get("tpf", {}).get("enabled"):
            sections["tpf"] = {**cfg["decode"], **cfg["tpf"]}
        for key, section in sections.items():
            out.append(
                (f"{path.parent.name}/{path.name}:{key}", DecodeOptions.from_config(section, "orthrus", "bf16", "sdpa"))
            )
    return out


def _expected_blocks(options, K, accepted, n_tokens):
    """The verify-block lengths a run with these accepted lengths took, from the schedule's
    definition (an oracle written apart from the loop): the prefill, then each step's block."""
    blocks, s, step = [], 1, 0
    while s < n_tokens:
        remaining = options.max_new_tokens - s
        if remaining == 1 and options.last_block == "full":
            blocks.append(1)  # a plain AR step
            s += 1
            continue
        n_draft = min(K, remaining + 1) - 1 if options.last_block == "shorten" else min(K - 1, remaining - 1)
        blocks.append(1 + n_draft)
        s += accepted[step] + 1
        step += 1
    return blocks


@pytest.mark.parametrize("name,options", _config_options(), ids=[n for n, _ in _config_options()])
def test_the_replay_is_the_run_for_every_config_setting(name, options, tmp_path):
    """For each config's options (a budget of 29 tokens, off the block grid, so that the last
    blocks are cut): a bf16 sdpa run through the decode stage, replayed from the options its rows
    record, emits the same tokens, takes the same blocks (against the schedule's oracle) and
    accepts the same lengths; the prefill computes the logits the options say."""
    import pandas as pd

    from orthrus.audit.forensics import row_options
    from orthrus.decode.stage import decode_prompts

    options = options.replace(max_new_tokens=29)
    model = tiny_orthrus(0, 8, "noisy", attn="sdpa", noise=1e-2, peaked=1.0, dtype=torch.bfloat16)

    class Tok:  # prompts as token lists: the message format only adds a token of its own
        def apply_chat_template(self, messages, **kw):
            return " ".join(["3"] * (messages[0]["role"] == "system") + [messages[-1]["content"]])

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [int(x) for x in text.split()]}

    g = torch.Generator().manual_seed(11)
    prompts = pd.DataFrame(
        {
            "prompt_id": [f"p{i}" for i in range(4)],
            "domain": ["x"] * 4,
            "prompt": [" ".join(map(str, torch.randint(4, 90, (5,), generator=g).tolist())) for _ in range(4)],
        }
    )
    rows = decode_prompts(model, Tok(), prompts, options, "m", progress=False)
    for r in rows.itertuples():
        recorded = [int(t) for t in r.tokens]
        opts = row_options(r)
        assert opts == options
        prompt = Tok()(
            Tok().apply_chat_template(
                [{"role": "system"}] * (opts.message != "none")
                + [{"role": "user", "content": prompts.prompt[int(r.prompt_id[1:])]}]
            )
        )["input_ids"]
        _, _, replayed, blocks = replay_verify(model, prompt, opts, len(recorded) - 1)
        assert replayed == recorded
        steps = [(kind, n, emitted) for kind, n, emitted in blocks if kind != "prefill"]
        assert [n for _, n, _ in steps] == _expected_blocks(opts, model.block_size, list(r.accepted), len(recorded))
        assert [emitted - 1 for kind, _, emitted in steps if kind == "verify"] == list(r.accepted)
        assert blocks[0][0] == "prefill" and blocks[0][1] == len(prompt) == r.prompt_len
