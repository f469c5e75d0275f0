"""Numerics or a bug: the verdict of each first divergence, the controls that calibrate it, and
the planted lossy decoder the audit must catch."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import MASK, save_tiny, teacher_and_orthrus, tiny_base

import orthrus
from orthrus.analysis.match import audit, compare_trajectories, decoders_table, match_overall
from orthrus.audit.forensics import judge
from orthrus.audit.forensics import main as forensics
from orthrus.audit.verdict import ROUNDING_ULPS, gap_ulps, parse_rounding_ulps, ulp, verdict
from orthrus.decode.stage import main as decode
from orthrus.decode.transformers_decoders import batched_generate, hf_generate
from orthrus.options import DecodeOptions, OptionsError


def test_ulp_is_the_spacing_of_the_precision_at_the_magnitude():
    assert ulp(1.0, "bf16") == 2**-7 and ulp(1.99, "bf16") == 2**-7
    assert ulp(10.0, "bf16") == 2**-4 and ulp(-10.0, "bf16") == 2**-4  # [8, 16): 2^3 * 2^-7
    assert ulp(0.3, "fp16") == 2**-12 and ulp(3.0, "fp32") == 2**-22
    assert ulp(0.0, "fp32") == 2**-23
    # every bf16 number in [8, 16) is a multiple of the ulp there
    x = torch.tensor([8.0, 9.3, 15.9]).bfloat16().float()
    assert all(float(v) / ulp(float(v), "bf16") == int(float(v) / ulp(float(v), "bf16")) for v in x)
    assert gap_ulps(10.125, 10.0, "bf16") == 2.0
    with pytest.raises(ValueError, match="precision"):
        ulp(1.0, "int8")


# (ref logit of ref token, ref logit of decoder token, decoder's own logit of its token, its pass's max) -> verdict
CASES = [
    ("tie", (5.0, 5.0, 5.25, 5.25, "bf16"), "tie"),
    ("rounding: 1 ulp in bf16", (10.0625, 10.0, 10.1875, 10.1875, "bf16"), "rounding"),
    ("rounding: 4 ulps in fp32", (3.0 + 4 * 2**-22, 3.0, 3.5, 3.5, "fp32"), "rounding"),
    ("structural: a token its own pass ranks second", (10.0, 9.9375, 9.9375, 10.0, "bf16"), "structural"),
    ("structural: own argmax, gap of 64 ulps", (14.0, 10.0, 11.0, 11.0, "bf16"), "structural"),
    ("structural in fp32 where bf16 would call it rounding", (10.0625, 10.0, 10.1875, 10.1875, "fp32"), "structural"),
]


@pytest.mark.parametrize(
    "ref_r, ref_d, ver_d, ver_max, precision, expected",
    [(*args, want) for _, args, want in CASES],
    ids=[c[0] for c in CASES],
)
def test_each_verdict_class_on_a_constructed_case(ref_r, ref_d, ver_d, ver_max, precision, expected):
    v, note = verdict(ref_r, ref_d, ver_d, ver_max, precision, max_ulps=4)
    assert v == expected and note


def test_the_bound_is_each_precisions_own():
    """analysis.rounding_ulps per precision: 5 fp32 ulps (what a 4-layer network's sums leave in
    fp32 logits) is rounding under the fp32 bound and structural under a bound of 2; a precision
    left out of a command line's bound keeps the default, and a bad bound is refused naming it."""
    case = (3.0 + 5 * 2**-22, 3.0, 3.5, 3.5, "fp32")
    assert verdict(*case, max_ulps=ROUNDING_ULPS)[0] == "rounding"
    assert verdict(*case, max_ulps={"fp32": 2.0})[0] == "structural"
    assert verdict(10.25, 10.0, 10.1875, 10.1875, "bf16", max_ulps=ROUNDING_ULPS)[0] == "rounding"  # 4 bf16 ulps
    assert verdict(10.5, 10.0, 10.1875, 10.1875, "bf16", max_ulps=ROUNDING_ULPS)[0] == "structural"  # 8
    assert parse_rounding_ulps("fp32=8") == ROUNDING_ULPS | {"fp32": 8.0}
    assert parse_rounding_ulps("3") == {"bf16": 3.0, "fp16": 3.0, "fp32": 3.0, "tf32": 3.0}
    for bad, why in [("fp8=1", "unknown precision 'fp8'"), ("fp32=-1", "finite number >= 0"), ("two", "expected ulps")]:
        with pytest.raises(ValueError, match=why):
            parse_rounding_ulps(bad)
    with pytest.raises(ValueError, match="no rounding bound for 'fp16'"):
        verdict(*case[:4], "fp16", max_ulps={"fp32": 2.0})


def test_the_schema_states_the_verdicts_bounds():
    """analysis.rounding_ulps's defaults, as the generated schema states them for editors and docs/CONFIG.md,
    are orthrus.audit.verdict.ROUNDING_ULPS (the config model takes them from it)."""
    import yaml

    schema = yaml.safe_load(
        (Path(__file__).resolve().parent.parent / "workflow/schemas/config.schema.yaml").read_text()
    )
    ulps = schema["$defs"]["Analysis"]["properties"]["rounding_ulps"]
    node = schema["$defs"][ulps["$ref"].rsplit("/", 1)[-1]] if "$ref" in ulps else ulps
    assert {p: v["default"] for p, v in node["properties"].items()} == ROUNDING_ULPS


def test_no_verdict_without_the_decoders_pass_or_a_reproduced_reference():
    assert verdict(5.0, 4.0, math.nan, 5.0, "bf16", 4) == (None, "the decoder's own pass could not be recomputed")
    v, note = verdict(4.0, 5.0, 5.0, 5.0, "bf16", 4)  # the step-by-step row ranks the decoder's token first
    assert v is None and "does not reproduce" in note


def test_judge_reads_the_four_logits_from_the_rows():
    step = torch.tensor([0.0, 10.0625, 10.0, -1.0]).bfloat16()
    ver = torch.tensor([0.0, 10.0, 10.0625, -1.0]).bfloat16()  # the verify pass swapped tokens 1 and 2 by an ulp
    j = judge(step, ver, 1, 2, "bf16", 4, consistent=True)
    assert j["verdict"] == "rounding" and j["verify_argmax"] and j["gap_ulps"] == 1.0
    assert (j["ref_logit_ref"], j["ref_logit_dec"], j["verify_logit_ref"], j["verify_logit_dec"]) == (
        10.0625,
        10.0,
        10.0,
        10.0625,
    )
    assert judge(step, ver, 1, 2, "bf16", 4, consistent=False)["verdict"] is None
    assert judge(step, step, 1, 2, "bf16", 4, consistent=True)["verdict"] == "structural"  # not its own argmax


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A teacher, an Orthrus model whose AR view is that teacher and whose diffusion view is a
    noisy copy of it (drafts often right), 24 prompts: the files a decode stage reads."""
    root = tmp_path_factory.mktemp("verdicts")
    base, orth = teacher_and_orthrus(3, init=0.3, shift=0.6, shift_seed=9, block_size=4, noise=0.02, noise_seed=5)
    g = torch.Generator().manual_seed(1)
    prompts = [
        " ".join(f"w{int(i)}" for i in torch.randint(2, MASK, (int(n),), generator=g))
        for n in torch.randint(2, 9, (24,), generator=g)
    ]
    prompts = {f"p{i}": ("ab"[i % 2], p) for i, p in enumerate(prompts)}
    save_tiny(root, {"teacher": base, "orthrus": orth}, prompts, prompts_file="prompts.parquet")
    return root


def _decode(study, model, decoder, p, a, out, *extra):
    assert (
        decode(
            [
                "--model-path",
                str(study / model),
                "--model-name",
                model,
                "--prompts",
                str(study / "prompts.parquet"),
                "--decoder",
                decoder,
                "--precision",
                p,
                "--attention",
                a,
                "--max-new-tokens",
                "40",
                "--no-progress",
                *extra,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return pd.read_parquet(out)


def _forensics(study, model, decoded, ref, out):
    assert (
        forensics(
            [
                "--model-path",
                str(study / model),
                "--prompts",
                str(study / "prompts.parquet"),
                "--decoded",
                str(decoded),
                "--reference",
                str(ref),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return pd.read_parquet(out)


@pytest.mark.parametrize("p, a", [("fp32", "eager"), ("bf16", "sdpa")])
def test_the_planted_lossy_decoder_is_flagged_structural(study, tmp_path, p, a):
    """Orthrus accepting a draft in the AR view's top 2 diverges, and the audit says it is a bug:
    its divergences `structural` (its token is not its own pass's argmax), the row `not lossless`.
    Where the two tokens are tied in bf16, taking the second is what any tie-break may do: `tie`."""
    ref = _decode(study, "teacher", "ar-ref", p, a, tmp_path / "ref.parquet")
    lossy = _decode(study, "orthrus", "orthrus-lossy", p, a, tmp_path / "lossy.parquet", "--block-size", "4")
    fx = _forensics(study, "orthrus", tmp_path / "lossy.parquet", tmp_path / "ref.parquet", tmp_path / "fx.parquet")
    assert len(fx) >= 3, "the planted bug must diverge to be caught"
    structural = fx[fx.verdict == "structural"]
    assert len(structural) >= 3 and fx.replay_consistent.all() and not structural.verify_argmax.any()
    # in bf16 a tie may decide first, or (where this CPU's sdpa parts a verify block from single
    # steps) a rounding of the loop's honest part before the planted bug acts
    assert (fx.verdict == "structural").all() if p == "fp32" else set(fx.verdict) <= {"structural", "tie", "rounding"}
    ties = fx[fx.verdict == "tie"]
    assert (ties.ref_logit_ref == ties.ref_logit_dec).all() and (ties.verify_logit_dec >= ties.verify_logit_ref).all()
    decoded = pd.concat([ref, lossy], ignore_index=True)
    overall = match_overall(compare_trajectories(decoded, "teacher"))
    table = decoders_table(overall, decoded, fx)
    row = table[table.decoder == "orthrus-lossy"].iloc[0]
    assert row.audit == "not lossless" and row.n_structural == len(structural) and row.n_no_verdict == 0


def test_the_controls_diverge_by_numerics_only(study, tmp_path, verify_kernel_noise):
    """bf16 sdpa: the oracle (reference drafts, K-token verify) and the batched reference part
    from the reference only at ties and roundings; the honest Orthrus loop too. The verify block's
    kernel differs from single steps on any CPU (planted, `verify_kernel_noise`), so the oracle does
    part from the reference, and the audit must call each of its divergences numerics."""
    ref = _decode(study, "teacher", "ar-ref", "bf16", "sdpa", tmp_path / "ref.parquet")
    oracle = _decode(
        study,
        "teacher",
        "oracle",
        "bf16",
        "sdpa",
        tmp_path / "oracle.parquet",
        "--block-size",
        "4",
        "--reference",
        str(tmp_path / "ref.parquet"),
    )
    batched = _decode(study, "teacher", "ar-batched", "bf16", "sdpa", tmp_path / "batched.parquet", "--batch-size", "6")
    orth = _decode(study, "orthrus", "orthrus", "bf16", "sdpa", tmp_path / "orthrus.parquet")
    assert json.loads(batched.env[0])["options"]["batch_size"] == 6 and json.loads(batched.env[0])["num_shards"] == 1
    assert sum(len(a) for a in oracle.accepted) > 0.5 * sum(len(t) for t in oracle.tokens) / 4, (
        "the oracle's drafts are accepted"
    )
    fx = pd.concat(
        [
            _forensics(
                study, "teacher", tmp_path / f"{d}.parquet", tmp_path / "ref.parquet", tmp_path / f"fx-{d}.parquet"
            )
            for d in ("oracle", "batched")
        ]
        + [
            _forensics(
                study, "orthrus", tmp_path / "orthrus.parquet", tmp_path / "ref.parquet", tmp_path / "fx-o.parquet"
            )
        ],
        ignore_index=True,
    )
    decoded = pd.concat([ref, oracle, batched, orth], ignore_index=True)
    overall = match_overall(compare_trajectories(decoded, "teacher"))
    oracle_rate = overall.set_index("decoder").match_rate["oracle"]
    assert oracle_rate < 1 and (fx.decoder == "oracle").sum() > 0, "the planted verify kernel parts the oracle"
    assert fx.replay_consistent.all() and fx.verdict.isin(["tie", "rounding"]).all(), fx[["decoder", "verdict"]]
    table = decoders_table(overall, decoded, fx)
    assert set(table.decoder) == {"orthrus", "oracle", "ar-batched"}
    assert table.oracle_match_rate.notna().all() and table.batch_match_rate.notna().all()
    audit = table.set_index("decoder").audit
    assert audit["oracle"] == "numerics" and set(audit) <= {"exact", "numerics", "numerics, within its oracle"}


def test_a_cell_on_the_first_prompts_of_each_domain_replays_in_its_own_batches(study, tmp_path):
    """decode.grids' prompts_per_domain: `orthrus decode --prompts-per-domain 5` decodes the first 5
    prompts of each domain, in the set's order, and ar-batched records it, so forensics rebuilds
    the batches the run formed from those prompts (not from the whole set's)."""
    from transformers import AutoTokenizer

    from orthrus.audit.forensics import batch_of, row_options
    from orthrus.options import env_record

    batched = _decode(
        study,
        "teacher",
        "ar-batched",
        "bf16",
        "sdpa",
        tmp_path / "batched.parquet",
        "--batch-size",
        "4",
        "--prompts-per-domain",
        "5",
    )
    prompts = pd.read_parquet(study / "prompts.parquet")
    first = [f"p{i}" for i in range(10)]  # domains alternate a, b: the first 5 of each are p0..p9
    assert list(batched.prompt_id) == first
    env = env_record(batched.env[0])
    assert env["prompts_per_domain"] == 5
    tok = AutoTokenizer.from_pretrained(study / "teacher")
    ids, i = batch_of(prompts, tok, row_options(batched.iloc[0]), env, "p5", 10_000)
    assert i == 1 and len(ids) == 4  # p4..p7: the second batch of the 10, not of all 24
    ref = _decode(study, "teacher", "ar-ref", "bf16", "sdpa", tmp_path / "ref.parquet")
    fx = _forensics(study, "teacher", tmp_path / "batched.parquet", tmp_path / "ref.parquet", tmp_path / "fx.parquet")
    assert fx.replay_consistent.all() and set(fx.prompt_id) <= set(first)
    assert len(ref) == 24


def test_the_oracle_is_the_reference_in_fp32_and_drafts_only_the_reference():
    base = tiny_base(2)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        prompt = torch.randint(2, MASK, (5,), generator=g)
        ref = hf_generate(base, prompt, DecodeOptions(decoder="ar-ref", max_new_tokens=30)).tokens
        drafts = []
        out = orthrus.generate(
            base,
            prompt,
            DecodeOptions(decoder="oracle", block_size=4, max_new_tokens=30),
            oracle=ref,
            trace=lambda f, toks, drafts=drafts: f.kind == "verify" and drafts.append((f.first, f.input_ids[1:])),
        )
        assert out.tokens.tolist() == ref
        for first, draft in drafts:  # each verify block reads the reference's own next tokens
            assert draft == ref[first : first + len(draft)]
        assert {len(d) for _, d in drafts[1:-1]} <= {3}  # K - 1 drafts per full block
    with pytest.raises(OptionsError, match="oracle"):
        orthrus.generate(base, prompt, DecodeOptions(decoder="oracle", block_size=4))
    with pytest.raises(OptionsError, match="greedy"):
        DecodeOptions(decoder="oracle", temperature=0.7)


def test_batched_generate_pads_on_the_left_and_stops_each_row_at_its_eos():
    base = tiny_base(1)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(2, MASK, (int(n),), generator=g) for n in (3, 9, 5, 1)]
    opts = DecodeOptions(decoder="ar-batched", batch_size=4, max_new_tokens=24)
    rows = batched_generate(base, prompts, opts)
    for p, row in zip(prompts, rows):  # fp32 eager: batching changes no token here
        assert row.tokens == hf_generate(base, p, DecodeOptions(decoder="ar-ref", max_new_tokens=24)).tokens
        assert row.finish_reason == ("eos" if row.tokens[-1] == 1 else "length")
    with pytest.raises(OptionsError, match="batch_size"):
        DecodeOptions(decoder="ar-ref", batch_size=8)
    with pytest.raises(OptionsError, match="batch_size"):
        DecodeOptions(decoder="ar-batched", batch_size=1)


def test_audit_words():
    from types import SimpleNamespace as Row

    base = dict(
        decoder="orthrus", n=10, match_rate=0.8, ci_high=0.95, oracle_match_rate=0.9, n_structural=0, n_no_verdict=0
    )
    assert audit(Row(**base | {"match_rate": 1.0})) == "exact"
    assert audit(Row(**base | {"n_structural": 1})) == "not lossless"
    assert audit(Row(**base | {"n_no_verdict": 2})) == "unexplained"
    assert audit(Row(**base)) == "numerics, within its oracle"
    assert audit(Row(**base | {"ci_high": 0.85})) == "numerics"
    assert audit(Row(**base | {"oracle_match_rate": math.nan})) == "numerics"
    assert audit(Row(**base | {"decoder": "ar-batched"})) == "numerics"  # the oracle speaks for verify blocks only


# the engine's own top 2 at the divergence, its token, the reference's token -> verdict (issue 33); the
# reference's logits 10.0625 / 10.0 (1 bf16 ulp apart, 0.0625 at [8, 16)) give the magnitude
ENGINE_CASES = [
    ("rounding: its own argmax by 1 ulp", [[6, -0.75], [7, -0.8125]], "rounding"),
    ("tie: its own two equal", [[7, -0.75], [6, -0.75]], "tie"),
    ("structural: a token its own pass ranks second", [[7, -0.5], [6, -0.75]], "structural"),
    ("structural: a token outside its own top 2", [[7, -0.5], [8, -0.75]], "structural"),
    ("structural: its own margin 8 ulps", [[6, -0.25], [7, -0.75]], "structural"),
    ("structural: the reference's token below a runner-up 8 ulps behind", [[6, -0.25], [8, -0.75]], "structural"),
    ("unknown: the reference's token below a runner-up 1 ulp behind", [[6, -0.25], [8, -0.3125]], None),
]


@pytest.mark.parametrize("name, top, expected", ENGINE_CASES, ids=[c[0] for c in ENGINE_CASES])
def test_an_engines_divergence_is_judged_by_its_own_top_2(name, top, expected):
    from orthrus.audit.verdict import engine_verdict

    v, note = engine_verdict(top, 6, 7, 10.0625, 10.0, "bf16", {"bf16": 4.0}, True)
    assert v == expected, note
    # the reference's own tie decides where the engine emitted its argmax
    if expected == "rounding":
        assert engine_verdict(top, 6, 7, 10.0, 10.0, "bf16", 4.0, True)[0] == "tie"


@pytest.mark.parametrize("decoder", ["ar-ref", "prompt-lookup", "assisted", "ar-batched"])
def test_a_replay_stopped_after_t_tokens_emits_the_full_runs_tokens_and_logits_up_to_t(decoder):
    base = tiny_base(1)
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(2, MASK, (6,), generator=g).repeat(3)  # repeats give prompt lookup drafts
    opts = DecodeOptions(decoder=decoder, max_new_tokens=40, **({"batch_size": 2} if decoder == "ar-batched" else {}))
    draft = base if decoder == "assisted" else None
    full, full_logits = hf_generate(base, prompt, opts, draft, logits=True)
    for t in (1, 7, 23):
        row, logits = hf_generate(base, prompt, opts, draft, logits=True, stop_after=t)
        n = min(t, len(full.tokens))
        assert row.tokens[:n] == full.tokens[:n] and len(row.tokens) < len(full.tokens)
        assert all(torch.equal(a, b) for a, b in zip(logits[:n], full_logits[:n]))


LLAMA = {"engine": "llama.cpp"}
ARITHMETIC_CASES = [
    ("vLLM's record: one dtype throughout", "fp32", {"engine": "vllm", "dtype": "float32"}, "fp32"),
    ("llama.cpp F32 with an f32 KV cache", "fp32", LLAMA | {"weights": "F32", "kv_cache": "f32"}, "fp32"),
    ("llama.cpp F32 with its default f16 KV cache", "fp32", LLAMA | {"weights": "F32", "kv_cache": "f16"}, "fp16"),
    ("a quantized file: 8-bit activation blocks", "fp32", LLAMA | {"weights": "Q4_1", "kv_cache": "f32"}, "bf16"),
    ("a file of unknown type adds nothing", "fp32", LLAMA | {"weights": "unknown", "kv_cache": "f32"}, "fp32"),
    ("the entry's own precision is the floor", "bf16", LLAMA | {"weights": "F32", "kv_cache": "f16"}, "bf16"),
    (
        "another engine's fields are not llama.cpp's",
        "fp32",
        {"engine": "x", "weights": "awq", "kv_cache": "fp8"},
        "fp32",
    ),
    ("no record", "fp16", None, "fp16"),
]


@pytest.mark.parametrize("name, precision, env, expected", ARITHMETIC_CASES, ids=[c[0] for c in ARITHMETIC_CASES])
def test_an_engines_verdict_takes_the_coarsest_rounding_its_record_names(name, precision, env, expected):
    from orthrus.audit.verdict import arithmetic_precision

    assert arithmetic_precision(precision, env) == expected


def test_a_quantized_servers_fork_within_its_8_bit_rounding_is_rounding_not_structural():
    """SmolLM2's Q4_1 file under load (docs/ENGINES.md): the server emitted its own argmax by 0.003 nats,
    1,666 fp32 ulps at a logit near 16 (far beyond fp32's bound) but a fortieth of one bf16 ulp; its
    arithmetic rounds the activations to 8 bits, so the verdict is rounding, in bf16's ulps, and says
    so; the same margin from an F32 file with an f32 KV cache stays structural."""
    import torch

    from orthrus.audit.forensics import judge_external
    from orthrus.audit.verdict import ROUNDING_ULPS, arithmetic_precision

    logits = torch.zeros(10)
    logits[7], logits[6] = 16.01, 16.0  # the reference's token 7 above the server's 6
    top = [[6, -0.500], [7, -0.50318]]
    q4 = arithmetic_precision("fp32", LLAMA | {"weights": "Q4_1", "kv_cache": "f16"})
    cols = judge_external(logits, 7, 6, "fp32", ROUNDING_ULPS, True, top, q4)
    assert cols["verdict"] == "rounding" and "in bf16's ulps" in cols["verdict_note"], cols
    assert cols["gap_ulps"] > ROUNDING_ULPS["fp32"]  # the cell's column stays in fp32's ulps
    f32 = arithmetic_precision("fp32", LLAMA | {"weights": "F32", "kv_cache": "f32"})
    cols = judge_external(logits, 7, 6, "fp32", ROUNDING_ULPS, True, top, f32)
    assert cols["verdict"] == "structural" and "ulps:" not in cols["verdict_note"], cols
    # a token the server's own pass does not rank first stays structural however coarse its arithmetic
    second = [[7, -0.5], [6, -0.6]]
    assert judge_external(logits, 7, 6, "fp32", ROUNDING_ULPS, True, second, q4)["verdict"] == "structural"
