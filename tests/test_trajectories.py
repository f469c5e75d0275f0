import json

import pandas as pd
from helpers import EOS, MASK, save_tiny, tiny_base
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from orthrus import OrthrusForCausalLM
from orthrus.decode.stage import main
from orthrus.options import DecodeOptions


def save_models(tmp_path):
    """A tiny teacher (two EOS ids, as Qwen3 has) and an Orthrus model from it, with a word tokenizer."""
    vocab = {f"w{i}": i for i in range(MASK)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1", pad_token="w0")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    base = tiny_base(0)
    base.generation_config.eos_token_id = [EOS, 2]
    model = OrthrusForCausalLM.from_base(base, block_size=4, mask_token_id=MASK)
    save_tiny(tmp_path, {"teacher": base, "orthrus": model}, tokenizer=fast)


def test_decode_cli_writes_one_file_per_precision_attention_pair(tmp_path):
    """ar-ref (transformers.generate) and orthrus over a 2x2 grid."""
    save_models(tmp_path)
    pd.DataFrame({"prompt_id": ["a", "b"], "domain": ["x", "y"], "prompt": ["w5 w6 w7", "w9"]}).to_parquet(
        tmp_path / "p.parquet"
    )
    for decoder, path in (("ar-ref", "teacher"), ("orthrus", "orthrus")):
        outs = [str(tmp_path / f"{decoder}-{p}-{a}.parquet") for p in ("bf16", "fp32") for a in ("eager", "sdpa")]
        assert (
            main(
                [
                    "--decoder",
                    decoder,
                    "--model-path",
                    str(tmp_path / path),
                    "--model-name",
                    path,
                    "--precision",
                    "bf16",
                    "fp32",
                    "--attention",
                    "eager",
                    "sdpa",
                    "--prompts",
                    str(tmp_path / "p.parquet"),
                    "--max-new-tokens",
                    "12",
                    "--no-progress",
                    "--out",
                    *outs,
                ]
            )
            == 0
        )
    ref = pd.read_parquet(tmp_path / "ar-ref-fp32-sdpa.parquet")
    orth = pd.read_parquet(tmp_path / "orthrus-fp32-sdpa.parquet")
    assert list(ref.prompt_id) == ["a", "b"] and (ref.finish_reason != "error").all(), ref.error.tolist()
    assert json.loads(orth.env.iloc[0])["attention"] == "sdpa" and json.loads(orth.env.iloc[0])["dtype"] == "fp32"
    assert [list(t) for t in ref.tokens] == [list(t) for t in orth.tokens]  # fp32: Orthrus is exact


def test_over_length_prompt_is_an_error_row_in_every_decoder_and_errors_fail_the_job(tmp_path, capsys):
    save_models(tmp_path)  # 256 positions
    tiny_base(1, layers=1).save_pretrained(tmp_path / "draft")  # assisted's draft, the teacher's tokenizer
    _word_tokenizer().save_pretrained(tmp_path / "draft")
    pd.DataFrame(
        {"prompt_id": ["a", "b"], "domain": ["x", "x"], "prompt": ["w5 w6", " ".join(["w5"] * 250)]}
    ).to_parquet(tmp_path / "p.parquet")
    for decoder, path, extra in (
        ("ar-ref", "teacher", []),
        ("orthrus", "orthrus", []),
        ("ar", "orthrus", []),
        ("assisted", "teacher", ["--draft-path", str(tmp_path / "draft")]),
        ("prompt-lookup", "teacher", []),
    ):
        out = tmp_path / f"{decoder}.parquet"
        args = [
            "--decoder",
            decoder,
            "--model-path",
            str(tmp_path / path),
            "--model-name",
            path,
            "--precision",
            "fp32",
            "--prompts",
            str(tmp_path / "p.parquet"),
            "--max-new-tokens",
            "12",
            "--no-progress",
            *extra,
            "--out",
            str(out),
        ]
        assert main(args) == 1 and not out.exists()
        assert "1 of 2 prompts failed" in capsys.readouterr().err
        assert main(args + ["--max-error-share", "0.5"]) == 0
        df = pd.read_parquet(out).set_index("prompt_id")
        assert df.finish_reason["a"] != "error" and df.finish_reason["b"] == "error"
        assert (
            df.error["b"]
            == "PromptTooLong: prompt (250 tokens) + max_new_tokens (12) exceeds the model's 256 positions"
        )


def test_decode_cli_protocol_options_are_recorded_in_env(tmp_path):
    """--message none, the released loop's options and determinism off reach the rows' env; a
    domain key with a space passes through; fp32 stays exact under every option."""
    vocab = {f"w{i}": i for i in range(MASK)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1", pad_token="w0")
    # system turns render as "w3", so the message format shows in the prompt length
    fast.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}w3 {% endif %}{{ m['content'] }} {% endfor %}"
    )
    model = OrthrusForCausalLM.from_base(tiny_base(0), block_size=4, mask_token_id=MASK)
    save_tiny(tmp_path, {"m": model}, {"wmt ru-en-0": ("wmt ru-en", "w5 w6 w7")}, tokenizer=fast)
    common = [
        "--model-path",
        str(tmp_path / "m"),
        "--model-name",
        "m",
        "--precision",
        "fp32",
        "--prompts",
        str(tmp_path / "p.parquet"),
        "--max-new-tokens",
        "9",
        "--no-progress",
    ]
    assert main(["--decoder", "orthrus", *common, "--out", str(tmp_path / "default.parquet")]) == 0
    assert (
        main(
            [
                "--decoder",
                "orthrus",
                *common,
                "--message",
                "none",
                "--eos",
                "config",
                "--last-block",
                "shorten",
                "--prefill-logits",
                "all",
                "--no-deterministic",
                "--out",
                str(tmp_path / "authors.parquet"),
            ]
        )
        == 0
    )
    assert main(["--decoder", "ar", *common, "--message", "none", "--out", str(tmp_path / "ar.parquet")]) == 0
    d, a, ar = (pd.read_parquet(tmp_path / f"{n}.parquet") for n in ("default", "authors", "ar"))
    opt_d, opt_a = (DecodeOptions.from_row(x.env.iloc[0], "orthrus", "fp32", "eager") for x in (d, a))
    assert opt_d == DecodeOptions(max_new_tokens=9)  # the flags left out: the options' defaults
    assert opt_a == DecodeOptions(
        max_new_tokens=9, message="none", eos="config", last_block="shorten", prefill_logits="all", deterministic=False
    )
    env_d, env_a = json.loads(d.env.iloc[0]), json.loads(a.env.iloc[0])
    assert env_d["deterministic"] and not env_a["deterministic"]  # torch's flags, recorded beside the options
    assert env_a["loop"] == "orthrus.generate"
    assert a.prompt_len.iloc[0] == d.prompt_len.iloc[0] - 1 and a.domain.iloc[0] == "wmt ru-en"
    assert list(a.tokens.iloc[0]) == list(ar.tokens.iloc[0])


def test_the_options_flags_and_the_options_json_decode_alike(tmp_path):
    """`--options JSON` (what the workflow passes) and the flags build the same setting, and the
    file records it; both at once is refused naming the flags."""
    import pytest

    save_models(tmp_path)
    pd.DataFrame({"prompt_id": ["a"], "domain": ["x"], "prompt": ["w5 w6 w7"]}).to_parquet(tmp_path / "p.parquet")
    common = [
        "--model-path",
        str(tmp_path / "orthrus"),
        "--model-name",
        "m",
        "--prompts",
        str(tmp_path / "p.parquet"),
        "--no-progress",
    ]
    opts = DecodeOptions(decoder="orthrus", precision="bf16", attention="sdpa", max_new_tokens=10, last_block="shorten")
    assert main([*common, "--options", opts.to_json(), "--out", str(tmp_path / "json.parquet")]) == 0
    assert (
        main(
            [
                *common,
                "--decoder",
                "orthrus",
                "--precision",
                "bf16",
                "--attention",
                "sdpa",
                "--max-new-tokens",
                "10",
                "--last-block",
                "shorten",
                "--out",
                str(tmp_path / "flags.parquet"),
            ]
        )
        == 0
    )
    j, f = (pd.read_parquet(tmp_path / f"{n}.parquet") for n in ("json", "flags"))
    assert [list(t) for t in j.tokens] == [list(t) for t in f.tokens]
    assert DecodeOptions.from_row(j.env.iloc[0], "orthrus", "bf16", "sdpa") == opts
    assert DecodeOptions.from_row(f.env.iloc[0], "orthrus", "bf16", "sdpa") == opts
    with pytest.raises(ValueError, match="--eos"):
        main([*common, "--options", opts.to_json(), "--eos", "config", "--out", str(tmp_path / "x.parquet")])


def _word_tokenizer(n=MASK):
    vocab = {f"w{i}": i for i in range(n)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1", pad_token="w0")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return fast


def test_transformers_speculative_decoders_equal_ar_in_fp32(tmp_path):
    """assisted (a 1-layer draft) and prompt-lookup through transformers' generate() emit the
    plain AR trajectory in fp32 (exact verification), and record forwards and accepted lengths."""
    tok = _word_tokenizer()
    for name, model in (("teacher", tiny_base(0)), ("draft", tiny_base(1, layers=1))):
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    # repetitive prompts, so that prompt lookup finds n-grams to propose
    prompts = ["w5 w6 w7 w5 w6 w7 w5 w6", "w9 w9 w9 w9", "w11 w12 w13 w14 w11 w12", "w20"]
    pd.DataFrame({"prompt_id": list("abcd"), "domain": ["x"] * 4, "prompt": prompts}).to_parquet(tmp_path / "p.parquet")
    common = [
        "--model-path",
        str(tmp_path / "teacher"),
        "--model-name",
        "teacher",
        "--precision",
        "fp32",
        "--attention",
        "sdpa",
        "--prompts",
        str(tmp_path / "p.parquet"),
        "--max-new-tokens",
        "24",
        "--no-progress",
    ]
    assert main(["--decoder", "ar-ref", *common, "--out", str(tmp_path / "ref.parquet")]) == 0
    assert (
        main(
            [
                "--decoder",
                "assisted",
                *common,
                "--draft-path",
                str(tmp_path / "draft"),
                "--out",
                str(tmp_path / "assisted.parquet"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "--decoder",
                "prompt-lookup",
                *common,
                "--prompt-lookup-tokens",
                "4",
                "--out",
                str(tmp_path / "lookup.parquet"),
            ]
        )
        == 0
    )
    ref, asst, look = (pd.read_parquet(tmp_path / f"{n}.parquet") for n in ("ref", "assisted", "lookup"))
    assert (ref.finish_reason != "error").all() and (asst.finish_reason != "error").all(), asst.error.tolist()
    assert (look.finish_reason != "error").all(), look.error.tolist()
    for df in (asst, look):
        assert [list(t) for t in df.tokens] == [list(t) for t in ref.tokens]
        # every emitted token is one accepted draft token or one per target forward
        for r in df.itertuples():
            assert len(r.accepted) == r.n_prefill + r.n_verify
            assert sum(r.accepted) + len(r.accepted) == len(r.tokens)
    assert (ref.n_verify == [len(t) - 1 for t in ref.tokens]).all() and ref.n_diffusion.eq(0).all()
    assert (asst.n_diffusion > 0).all() and look.n_diffusion.eq(0).all()
    assert sum(map(sum, look.accepted)) > 0  # the repetitive prompts gave prompt lookup something to accept
    env_a, env_l = json.loads(asst.env.iloc[0]), json.loads(look.env.iloc[0])
    assert env_a["loop"] == "transformers.generate" and env_a["draft"] == str(tmp_path / "draft")
    assert env_a["num_assistant_tokens"] == 20 and env_l["options"]["prompt_lookup_tokens"] == 4


def test_assisted_refuses_a_draft_with_another_tokenizer_naming_both(tmp_path):
    import pytest

    tiny_base(0).save_pretrained(tmp_path / "teacher")
    _word_tokenizer().save_pretrained(tmp_path / "teacher")
    tiny_base(1, layers=1).save_pretrained(tmp_path / "draft")
    _word_tokenizer(MASK - 3).save_pretrained(tmp_path / "draft")
    pd.DataFrame({"prompt_id": ["a"], "domain": ["x"], "prompt": ["w5"]}).to_parquet(tmp_path / "p.parquet")
    with pytest.raises(ValueError) as err:
        main(
            [
                "--decoder",
                "assisted",
                "--model-path",
                str(tmp_path / "teacher"),
                "--model-name",
                "teacher",
                "--precision",
                "fp32",
                "--prompts",
                str(tmp_path / "p.parquet"),
                "--max-new-tokens",
                "4",
                "--draft-path",
                str(tmp_path / "draft"),
                "--no-progress",
                "--out",
                str(tmp_path / "o.parquet"),
            ]
        )
    assert str(tmp_path / "draft") in str(err.value) and str(tmp_path / "teacher") in str(err.value)


def test_assisted_prompt_too_long_for_the_draft_is_an_error_row(tmp_path, capsys):
    """The draft's positions bound assisted's prompts too: a prompt that fits the model but not a
    draft with 64 positions is an error row, and a prompt set that is not one is refused."""
    import pytest

    tok = _word_tokenizer()
    for name, model in (("teacher", tiny_base(0)), ("draft", tiny_base(1, layers=1, positions=64))):
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    pd.DataFrame(
        {"prompt_id": ["a", "b"], "domain": ["x", "x"], "prompt": ["w5 w6", " ".join(["w5"] * 60)]}
    ).to_parquet(tmp_path / "p.parquet")
    args = [
        "--decoder",
        "assisted",
        "--model-path",
        str(tmp_path / "teacher"),
        "--model-name",
        "teacher",
        "--precision",
        "fp32",
        "--prompts",
        str(tmp_path / "p.parquet"),
        "--max-new-tokens",
        "8",
        "--draft-path",
        str(tmp_path / "draft"),
        "--no-progress",
        "--max-error-share",
        "0.5",
        "--out",
        str(tmp_path / "o.parquet"),
    ]
    assert main(args) == 0
    df = pd.read_parquet(tmp_path / "o.parquet").set_index("prompt_id")
    assert df.finish_reason["a"] != "error"
    assert df.error["b"] == "PromptTooLong: prompt (60 tokens) + max_new_tokens (8) exceeds the model's 64 positions"
    # the prompt set goes through read_prompt_set: duplicate ids are refused before any model loads
    pd.DataFrame({"prompt_id": ["a", "a"], "domain": ["x", "x"], "prompt": ["w5", "w6"]}).to_parquet(
        tmp_path / "p.parquet"
    )
    with pytest.raises(Exception, match="prompt_id"):
        main(args)
    with pytest.raises(ValueError, match="prompt_lookup_tokens"):
        main([*args[:-2], "--prompt-lookup-tokens", "0", "--out", str(tmp_path / "o.parquet")])


def test_decoding_prints_no_deprecation_warning(tmp_path):
    """Every decoder through the decode stage, with Python warnings and transformers' own logger
    watched: nothing deprecated (transformers announces removals there before they break)."""
    import logging
    import warnings

    import transformers

    from orthrus.decode.stage import decode_prompts
    from orthrus.models.loading import load_model

    save_models(tmp_path)
    prompts = pd.DataFrame({"prompt_id": ["a"], "domain": ["x"], "prompt": ["w5 w6 w7"]})
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = transformers.utils.logging.get_logger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for decoder, path in (
                ("ar-ref", "teacher"),
                ("prompt-lookup", "teacher"),
                ("orthrus", "orthrus"),
                ("ar", "orthrus"),
            ):
                opts = DecodeOptions(decoder=decoder, precision="bf16", attention="sdpa", max_new_tokens=8)
                model, tok = load_model(tmp_path / path, opts)
                decode_prompts(model, tok, prompts, opts, path, progress=False)
    finally:
        logger.removeHandler(handler)
    said = [str(w.message) for w in caught] + [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert not [m for m in said if "deprecat" in m.lower() or "past_key_values" in m], said
