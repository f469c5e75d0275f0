"""An engine's trajectories as a decoder of the study: `orthrus export-prompts` out, a JSON Lines file
back in through `orthrus ingest`, and every later stage on it (decode.external, docs/EXTERNAL.md)."""

import json

import pandas as pd
import pytest
import torch
from helpers import EOS, save_tiny, tiny_base, word_tokenizer

from orthrus import contracts
from orthrus.analysis import analyze
from orthrus.chat import render_chat
from orthrus.cli import main as cli
from orthrus.engines.export_prompts import stop_ids
from orthrus.engines.formats import EXPORT_FIELDS
from orthrus.engines.ingest import cell, ingest
from orthrus.errors import InputError
from orthrus.options import DecodeOptions

PROMPTS = {"p0": ("d0", "w5 w6 w7"), "p1": ("d0", "w9 w3"), "p2": ("d1", "w11 w12 w13 w14"), "p3": ("d1", "w20")}
MAX_NEW = 12


def world(tmp_path, model=None):
    """A tiny teacher (`model`, default a random Qwen3) with the word tokenizer, the prompt set, and the
    teacher's ar-ref trajectories at fp32/eager: (teacher dir, prompts file, ar-ref file)."""
    model = model if model is not None else tiny_base(0)
    model.generation_config.eos_token_id = [EOS]
    prompts = save_tiny(tmp_path, {"teacher": model}, PROMPTS, prompts_file="eval.parquet")
    ref = tmp_path / "ar-ref-fp32-eager.parquet"
    assert (
        cli(
            [
                "decode",
                "--decoder",
                "ar-ref",
                "--model-path",
                str(tmp_path / "teacher"),
                "--model-name",
                "teacher",
                "--precision",
                "fp32",
                "--attention",
                "eager",
                "--prompts",
                str(prompts),
                "--max-new-tokens",
                str(MAX_NEW),
                "--no-progress",
                "--out",
                str(ref),
            ]
        )
        == 0
    )
    return tmp_path / "teacher", prompts, ref


def export(tmp_path, teacher, prompts):
    out = tmp_path / "prompts.jsonl"
    assert (
        cli(
            [
                "export-prompts",
                "--model-path",
                str(teacher),
                "--prompts",
                str(prompts),
                "--max-new-tokens",
                str(MAX_NEW),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return [json.loads(line) for line in out.read_text().splitlines()]


def engine_run(teacher, exported, **env):
    """What an engine does with the exported prompts: greedy generate from the token ids, stopping at
    the stop ids, one record per prompt (here transformers' generate on the teacher)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(teacher, dtype=torch.float32, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(teacher)
    records = []
    for r in exported:
        ids = torch.tensor([r["prompt_token_ids"]])
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=r["max_new_tokens"],
                eos_token_id=r["stop_token_ids"],
                pad_token_id=0,
            )
        tokens = out[0, ids.shape[1] :].tolist()
        records.append(
            {
                "prompt_id": r["prompt_id"],
                "token_ids": tokens,
                "text": tok.decode(tokens, skip_special_tokens=True),
                "finish_reason": "stop" if tokens and tokens[-1] in r["stop_token_ids"] else "length",
                "prompt_token_ids": r["prompt_token_ids"],
                "forwards": len(tokens),
                "env": {
                    "engine": "transformers",
                    "version": "test",
                    "dtype": "float32",
                    "kernel": "eager",
                    "batch_size": 1,
                    "device": "cpu",
                    **env,
                },
            }
        )
    return records


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def ingest_cli(tmp_path, teacher, prompts, path, name, reference=None, precision="fp32", attention="eager"):
    out = tmp_path / name / f"external-{precision}-{attention}.parquet"
    options = DecodeOptions(decoder="external", precision=precision, attention=attention, max_new_tokens=MAX_NEW)
    rc = cli(
        [
            "ingest",
            "--file",
            str(path),
            "--name",
            name,
            "--prompts",
            str(prompts),
            "--model-path",
            str(teacher),
            "--options",
            options.to_json(),
            *(["--reference", reference] if reference else []),
            "--out",
            str(out),
        ]
    )
    return rc, out


def test_exported_prompts_round_trip(tmp_path):
    """Each exported record holds the study's rendering of its prompt: re-tokenising the chat-rendered
    text gives its token ids, which are render_chat's; the generation settings are the study's and the
    stop ids transformers' generate stops on; a file written from them ingests with the same ids."""
    teacher, prompts, _ = world(tmp_path)
    exported = export(tmp_path, teacher, prompts)
    tok = word_tokenizer()
    assert [r["prompt_id"] for r in exported] == list(PROMPTS)
    for r in exported:
        assert list(r) == EXPORT_FIELDS
        assert tok(r["prompt_text"], add_special_tokens=False)["input_ids"] == r["prompt_token_ids"]
        assert r["prompt_token_ids"] == render_chat(tok, PROMPTS[r["prompt_id"]][1], DecodeOptions.message)
        assert (r["max_new_tokens"], r["stop_token_ids"], r["temperature"]) == (MAX_NEW, [EOS], 0.0)
        assert r["messages"][-1] == {"role": "user", "content": PROMPTS[r["prompt_id"]][1]}
    assert stop_ids(teacher) == [EOS]
    rc, out = ingest_cli(
        tmp_path, teacher, prompts, write(tmp_path / "e.jsonl", engine_run(teacher, exported)), "engine"
    )
    assert rc == 0
    df = pd.read_parquet(out)
    assert list(df.columns) == contracts.DECODE_COLUMNS and list(df.prompt_id) == list(PROMPTS)
    assert list(df.prompt_len) == [len(r["prompt_token_ids"]) for r in exported]


def test_a_file_from_transformers_generate_matches_the_ar_ref_reference_exactly(tmp_path):
    """The engine file of the teacher's own greedy generate joins the tables as decoder `external`:
    every prompt matches ar-ref, tokens per forward from its forward counts, in decoders.csv too."""
    teacher, prompts, ref = world(tmp_path)
    path = write(tmp_path / "engine.jsonl", engine_run(teacher, export(tmp_path, teacher, prompts)))
    rc, out = ingest_cli(tmp_path, teacher, prompts, path, "engine")
    assert rc == 0
    tables = analyze([str(ref), str(out)])
    mo = tables["match_overall.csv"].set_index("decoder").loc["external"]
    assert (mo.model, mo.n, mo.match_rate, mo.n_errors_excluded) == ("engine", len(PROMPTS), 1.0, 0)
    traj = tables["trajectories.parquet"]
    assert set(traj.loc[traj.decoder == "external", "reference"]) == {"teacher"}
    tpf = tables["tpf_by_domain.csv"]
    assert (tpf.loc[(tpf.decoder == "external") & (tpf.domain == "all"), "tpf_verify"] == 1.0).all()
    dec = tables["decoders.csv"].set_index("decoder").loc["external"]
    assert (dec.audit, dec.n) == ("exact", len(PROMPTS))
    row = pd.read_parquet(out).iloc[0]
    env = json.loads(row.env)
    assert env["engine_env"]["engine"] == "transformers" and env["external"]["line"] == 1
    assert DecodeOptions.from_row(row.env, "external", "fp32", "eager").max_new_tokens == MAX_NEW


def test_planted_changes_give_exactly_those_divergences_counts_and_errors(tmp_path):
    """One token flipped at a known position, one prompt left out, one record cut short: the flip is the
    one divergence at its position, with forensics scored by the teacher; the cut record diverges where
    it ends (no forensics row: nothing to score); the missing prompt is an error row, counted."""
    teacher, prompts, ref = world(tmp_path)
    records = engine_run(teacher, export(tmp_path, teacher, prompts))
    by = {r["prompt_id"]: r for r in records}
    flip_at, cut_at = 3, 5
    assert all(len(by[p]["token_ids"]) > cut_at for p in ("p0", "p2"))
    t = by["p0"]["token_ids"]
    t[flip_at] = 40 if t[flip_at] != 40 else 41
    by["p0"].update(text=None, forwards=None)
    # cut short without a finish_reason (one record of three: kept; `length` would say another budget, refused)
    by["p2"].update(token_ids=by["p2"]["token_ids"][:cut_at], text=None, finish_reason=None, forwards=cut_at)
    path = write(tmp_path / "planted.jsonl", [by["p0"], by["p2"], by["p3"]])  # p1 left out
    rc, out = ingest_cli(tmp_path, teacher, prompts, path, "planted")
    assert rc == 0
    df = pd.read_parquet(out).set_index("prompt_id")
    assert df.finish_reason["p1"] == "error" and df.error["p1"].startswith("Missing:") and str(path) in df.error["p1"]
    fx_out = tmp_path / "fx.parquet"
    assert (
        cli(
            [
                "forensics",
                "--model-path",
                str(teacher),
                "--prompts",
                str(prompts),
                "--decoded",
                str(out),
                "--reference",
                str(ref),
                "--out",
                str(fx_out),
            ]
        )
        == 0
    )
    fx = pd.read_parquet(fx_out)
    assert list(fx.prompt_id) == ["p0"] and fx.position.tolist() == [flip_at] and fx.decoder.tolist() == ["external"]
    assert fx.orthrus_token.tolist() == [t[flip_at]] and bool(fx.replay_consistent.iloc[0])
    assert fx.verify_logit_dec.isna().all() and fx.margin_native.notna().all() and fx.margin_fp32.notna().all()
    assert fx.verdict.iloc[0] is None and "engine's logits" in fx.verdict_note.iloc[0]  # a planted token: no rounding
    tables = analyze([str(ref), str(out)], forensics_path=str(fx_out))
    traj = tables["trajectories.parquet"].query("decoder == 'external'").set_index("prompt_id")
    assert sorted(traj.index) == ["p0", "p2", "p3"]
    first = traj.first_divergence
    assert first["p0"] == flip_at and first["p2"] == cut_at and pd.isna(first["p3"])
    assert traj.match.to_dict() == {"p0": False, "p2": False, "p3": True}
    mo = tables["match_overall.csv"].set_index("decoder").loc["external"]
    assert (mo.n, mo.match_rate, mo.n_errors_excluded) == (3, 1 / 3, 1)
    by_domain = tables["match_by_domain.csv"].query("decoder == 'external'").set_index("domain")
    assert by_domain.n_errors_excluded.to_dict() == {"d0": 1, "d1": 0}
    dec = tables["decoders.csv"].set_index("decoder").loc["external"]
    assert (dec.n_tie, dec.n_rounding, dec.n_structural, dec.n_no_verdict, dec.audit) == (0, 0, 0, 2, "unexplained")
    pw = tables["pairwise_match.csv"]
    assert ((pw.a_decoder == "external") & (pw.b_decoder == "ar-ref")).sum() == 1


def test_an_engine_pair_is_compared_with_its_own_plain_run(tmp_path):
    """`reference: NAME`: the speculative run is compared with the same engine's plain run, not with the
    in-process ar-ref; the plain run itself with ar-ref; the perplexity of the pair's rows is that of
    the plain run's response (scored by the teacher)."""
    teacher, prompts, ref = world(tmp_path)
    exported = export(tmp_path, teacher, prompts)
    plain = engine_run(teacher, exported)
    plain[0]["token_ids"][2] = 40 if plain[0]["token_ids"][2] != 40 else 41  # the engine's AR parts from ours on p0
    plain[0].update(text=None)
    spec = [dict(r, env={**r["env"], "speculative": "eagle"}) for r in json.loads(json.dumps(plain))]  # = its plain run
    plain = plain[:3]  # p3 missing from the plain run: an error row of the reference, counted for the pair too
    _, plain_out = ingest_cli(tmp_path, teacher, prompts, write(tmp_path / "plain.jsonl", plain), "eng-ar")
    rc, spec_out = ingest_cli(
        tmp_path, teacher, prompts, write(tmp_path / "spec.jsonl", spec), "eng-spec", reference="eng-ar"
    )
    assert rc == 0
    ppl_out = tmp_path / "ppl.parquet"
    assert (
        cli(
            [
                "perplexity",
                "--teacher",
                str(teacher),
                "--prompts",
                str(prompts),
                "--decode",
                str(ref),
                str(plain_out),
                "--out",
                str(ppl_out),
            ]
        )
        == 0
    )
    tables = analyze([str(ref), str(plain_out), str(spec_out)], ppl_path=str(ppl_out))
    mo = tables["match_overall.csv"].set_index("model")
    assert (mo.n["eng-spec"], mo.match_rate["eng-spec"], mo.n_errors_excluded["eng-spec"]) == (3, 1.0, 1)
    assert (mo.n["eng-ar"], mo.match_rate["eng-ar"], mo.n_errors_excluded["eng-ar"]) == (3, 2 / 3, 1)
    traj = tables["trajectories.parquet"]
    assert set(traj.loc[traj.model == "eng-spec", "reference"]) == {"eng-ar"}
    assert set(traj.loc[traj.model == "eng-ar", "reference"]) == {"teacher"}
    ppl = pd.read_parquet(ppl_out)
    own = ppl[ppl.model == "eng-ar"].set_index("prompt_id").ppl
    spec_rows = traj[traj.model == "eng-spec"].set_index("prompt_id").ppl
    assert spec_rows["p0"] == pytest.approx(own["p0"])
    assert traj[traj.model == "eng-ar"].set_index("prompt_id").ppl["p0"] != pytest.approx(own["p0"])


def _record(**changes):
    base = {"prompt_id": "p0", "token_ids": [5, 6], "env": {"engine": "vllm", "dtype": "bfloat16"}}
    return {k: v for k, v in (base | changes).items() if v is not ...}


@pytest.mark.parametrize(
    "lines, message",
    [
        ([_record(prompt_id="nope")], ":1: field 'prompt_id': 'nope' is not a prompt of the study"),
        ([_record(prompt_id=...)], ":1: field 'prompt_id': required field missing"),
        ([_record(prompt_id=3)], ":1: field 'prompt_id': must be a string"),
        ([_record(), _record(token_ids=[5])], ":2: field 'prompt_id': 'p0' is given twice (first on line 1)"),
        (
            [_record(prompt_id="p1"), _record(token_ids=[5, 6.5])],
            ":2: field 'token_ids': item 1 is 6.5, not an integer",
        ),
        ([_record(token_ids=[5, "6"])], ":1: field 'token_ids': item 1 is '6', not an integer"),
        ([_record(token_ids=[True])], ":1: field 'token_ids': item 0 is True, not an integer"),
        ([_record(token_ids=[5, 95])], ":1: field 'token_ids': item 1 is 95, outside the tokenizer's vocabulary 0..94"),
        ([_record(token_ids=[-1])], ":1: field 'token_ids': item 0 is -1, outside"),
        ([_record(token_ids=[5] * (MAX_NEW + 1))], "more than the study's max_new_tokens"),
        ([_record(tokens=[5])], ":1: field 'tokens': unknown field"),
        ([_record(env="vllm")], ":1: field 'env': must be an object"),
        ([_record(env={"dtype": "bf16"})], ":1: field 'env.engine': required"),
        ([_record(env={"engine": "vllm", "dtype": "float16"})], ":1: field 'env.dtype': 'float16' is not bf16"),
        ([_record(prompt_token_ids=[5, 6])], ":1: field 'prompt_token_ids': not the study's prompt"),
        ([_record(text="w5 w7")], ":1: field 'text': the token ids do not decode to it"),
        (
            [_record(finish_reason="stop")],
            ":1: field 'finish_reason': 'stop', but token_ids does not end with a stop id",
        ),
        ([_record(forwards=0)], ":1: field 'forwards': must be an integer >= 1"),
        # issue 35: a file decoded with another token budget, or from prompts exported with other settings
        (
            [_record(finish_reason="length")],
            ":1: field 'finish_reason': 'length' after 2 tokens, fewer than the study's "
            "max_new_tokens 12: the engine ran with another token budget",
        ),
        ([_record(settings={"max_new_tokens": 128})], ":1: field 'settings.max_new_tokens': 128, not the study's 12"),
        ([_record(settings={"stop_token_ids": [2]})], ":1: field 'settings.stop_token_ids': [2], not the study's [1]"),
        ([_record(settings={"message": "none"})], ":1: field 'settings.message': 'none', not the study's 'empty'"),
        ([_record(settings={"top_p": 0.9})], ":1: field 'settings.top_p': unknown setting"),
        ([_record(settings=[12])], ":1: field 'settings': must be an object"),
        # issue 33: the engine's own top-2 log-probabilities, one entry per generated token
        (
            [_record(logprobs=[[[5, -0.1], [7, -2.0]]])],
            ":1: field 'logprobs': must be a list with one entry per token_ids item (2), got 1",
        ),
        (
            [_record(logprobs=[[[5, -0.1], [7, -2.0]], [[6, -0.5]]])],
            ":1: field 'logprobs': position 1: must be a list of at least 2 [token_id, logprob] pairs",
        ),
        (
            [_record(logprobs=[[[5, -0.1], [7, -2.0]], [[6, -0.5], [95, -1.0]]])],
            ":1: field 'logprobs': position 1: [95, -1.0] is not a [token_id, logprob] pair",
        ),
        (
            [_record(logprobs=[[[5, -0.1], [7, -2.0]], [[6, -0.5], [8, "x"]]])],
            "position 1: [8, 'x'] is not a [token_id, logprob] pair",
        ),
        (
            [_record(logprobs=[[[5, -2.0], [7, -0.1]], [[6, -0.5], [8, -1.0]]])],
            ":1: field 'logprobs': position 0: not in rank order",
        ),
        (
            [_record(prompt_id=p, token_ids=[5] * (3 + k)) for k, p in enumerate(PROMPTS)],
            ":1: field 'token_ids': 3 tokens, no stop id, fewer than the study's max_new_tokens 12, and so end 4 of 4 records",
        ),
    ],
)
def test_a_bad_record_fails_naming_the_file_the_line_and_the_field(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    prompts = pd.DataFrame(
        {
            "prompt_id": list(PROMPTS),
            "domain": [d for d, _ in PROMPTS.values()],
            "prompt": [p for _, p in PROMPTS.values()],
        }
    )
    options = DecodeOptions(decoder="external", precision="bf16", attention="sdpa", max_new_tokens=MAX_NEW)
    with pytest.raises(InputError, match="^" + str(path).replace(".", r"\.") + ":") as err:
        ingest(path, "bad", prompts, word_tokenizer(), options, [EOS])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_record_cut_off_mid_line_and_a_bad_cell_fail_in_one_line(tmp_path, capsys):
    teacher, prompts, _ = world(tmp_path)
    path = tmp_path / "cut.jsonl"
    path.write_text(
        json.dumps(_record(env={"engine": "vllm", "dtype": "float32"}))
        + "\n"
        + json.dumps(_record(prompt_id="p1"))[:25]
        + "\n"
    )
    capsys.readouterr()
    rc, out = ingest_cli(tmp_path, teacher, prompts, path, "cut")
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists() and f"{path}:2: not a JSON object" in err and err.count("\n") == 1
    # the column in the line (the string cut open at 21 of 25 characters), not column 1 of a line after it
    assert "Unterminated string starting at column 21 of a 25-character line" in err, err
    # the cell: the entry's, else the first record's env; a kernel of the engine's own needs the entry's attention
    assert cell("cut", {"path": str(path), "attention": "sdpa"}) == ("fp32", "sdpa")
    with pytest.raises(InputError, match="decode.external.x.attention: not set.*'flashinfer'"):
        cell(
            "x",
            {
                "path": str(
                    write(
                        tmp_path / "k.jsonl",
                        [_record(env={"engine": "sglang", "dtype": "bf16", "kernel": "flashinfer"})],
                    )
                )
            },
        )
    assert cell("x", {"path": str(tmp_path / "k.jsonl"), "attention": "eager"}) == ("bf16", "eager")
    with pytest.raises(
        InputError, match="decode.external.y.path: .* does not exist yet.*set decode.external.y.precision"
    ):
        cell("y", {"path": str(tmp_path / "later.jsonl")})


def test_an_engine_failure_is_an_error_row_and_the_options_refuse_loop_settings(tmp_path):
    prompts = pd.DataFrame({"prompt_id": ["p0", "p1"], "domain": ["d", "d"], "prompt": ["w5", "w6"]})
    path = write(tmp_path / "f.jsonl", [_record(finish_reason="abort"), _record(prompt_id="p1", token_ids=[7, EOS])])
    options = DecodeOptions(decoder="external", precision="bf16", attention="sdpa", max_new_tokens=MAX_NEW)
    df, report = ingest(path, "f", prompts, word_tokenizer(), options, [EOS])
    df = df.set_index("prompt_id")
    assert df.finish_reason.to_dict() == {"p0": "error", "p1": "eos"} and "'abort'" in df.error["p0"]
    assert report == {"records": 2, "missing": 0, "engine_errors": 1, "ended_early": 0, "past_stop": 0}
    with pytest.raises(InputError, match="decoder external runs an engine outside this package"):
        DecodeOptions(decoder="external", block_size=4)


def test_the_stand_in_engine_writes_what_an_engine_would(tmp_path, capsys):
    """The transformers stand-in engine (decode.external's stand_in, `orthrus engine-run --engine
    transformers`) reads the export and writes an engine's file: its plain run is ar-ref's trajectories,
    its prompt-lookup run records accepted tokens and forwards."""
    teacher, prompts, ref = world(tmp_path)
    export(tmp_path, teacher, prompts)
    runs = {}
    for decoder in ("ar-ref", "prompt-lookup"):
        out = tmp_path / f"{decoder}.jsonl"
        options = DecodeOptions(decoder=decoder, precision="fp32", attention="eager", max_new_tokens=MAX_NEW)
        run = {"name": decoder, "out": str(out), "options": options.to_json(), "device": "cpu", "seed": 0}
        cmd = ["engine-run", "--engine", "transformers", "--model-path", str(teacher)]
        assert cli([*cmd, "--prompts", str(tmp_path / "prompts.jsonl"), "--runs", json.dumps([run])]) == 0
        runs[decoder] = [json.loads(line) for line in out.read_text().splitlines()]
        assert ingest_cli(tmp_path, teacher, prompts, out, decoder)[0] == 0
    reference = pd.read_parquet(ref)
    assert [r["token_ids"] for r in runs["ar-ref"]] == [list(t) for t in reference.tokens]
    assert all(r["forwards"] == len(r["token_ids"]) for r in runs["ar-ref"])
    assert all("accepted" in r and r["forwards"] >= 1 for r in runs["prompt-lookup"])
    assert runs["ar-ref"][0]["env"]["dtype"] == "fp32" and runs["ar-ref"][0]["env"]["kernel"] == "eager"
    # a run at a decoder the stand-in does not play is refused, naming the run
    options = DecodeOptions(decoder="assisted", precision="fp32", attention="eager", max_new_tokens=MAX_NEW)
    run = {"name": "x", "out": str(tmp_path / "x.jsonl"), "options": options.to_json(), "device": "cpu", "seed": 0}
    capsys.readouterr()
    cmd = ["engine-run", "--engine", "transformers", "--model-path", str(teacher)]
    assert cli([*cmd, "--prompts", str(tmp_path / "prompts.jsonl"), "--runs", json.dumps([run])]) != 0
    assert "run x: the stand-in engine runs ar-ref or prompt-lookup, got assisted" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_a_file_made_from_prompts_exported_with_another_budget_fails_ingest(tmp_path, capsys):
    """Issue 35: prompts exported with a smaller --max-new-tokens than the study's, decoded by the engine,
    fail ingest naming file, line and field, with the likely cause (not an exit 0 and a lower match rate):
    through the records' finish_reason `length`, through their echoed export settings, and, where the
    engine gives neither, through the records that end early in bulk."""
    teacher, prompts, _ = world(tmp_path)
    out = tmp_path / "short.jsonl"
    assert (
        cli(
            [
                "export-prompts",
                "--model-path",
                str(teacher),
                "--prompts",
                str(prompts),
                "--max-new-tokens",
                "6",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    records = engine_run(teacher, exported)
    early = [i for i, r in enumerate(records, 1) if r["finish_reason"] == "length"]
    assert len(early) >= 2, records  # the micro teacher runs to the budget on most prompts
    capsys.readouterr()
    rc, _ = ingest_cli(tmp_path, teacher, prompts, write(tmp_path / "a.jsonl", records), "a")
    err = capsys.readouterr().err
    assert (
        rc == 2
        and f"a.jsonl:{early[0]}: field 'finish_reason': 'length' after 6 tokens, fewer than the study's "
        f"max_new_tokens {MAX_NEW}"
        in err
        and "another token budget" in err
    ), err
    echoed = [
        dict(r, finish_reason=None, settings={k: e[k] for k in ("max_new_tokens", "stop_token_ids", "message")})
        for r, e in zip(records, exported)
    ]
    rc, _ = ingest_cli(tmp_path, teacher, prompts, write(tmp_path / "b.jsonl", echoed), "b")
    err = capsys.readouterr().err
    assert rc == 2 and f"b.jsonl:1: field 'settings.max_new_tokens': 6, not the study's {MAX_NEW}" in err, err
    bare = [{k: v for k, v in r.items() if k != "finish_reason"} for r in records]
    rc, _ = ingest_cli(tmp_path, teacher, prompts, write(tmp_path / "c.jsonl", bare), "c")
    err = capsys.readouterr().err
    assert rc == 2 and f"c.jsonl:{early[0]}: field 'token_ids': 6 tokens, no stop id" in err, err
    assert f"and so end {len(early)} of {len(records)} records" in err


def test_the_engines_own_logprobs_reach_the_rows_and_fill_the_verdict_columns(tmp_path):
    """An engine file with its own top-2 log-probabilities (issue 33): ingest keeps them in the rows'
    env, and a first divergence gets a verdict from them, argmax and margin, as an in-process decoder does."""
    from orthrus.audit.forensics import engine_top, judge_external

    prompts = pd.DataFrame(
        {
            "prompt_id": list(PROMPTS),
            "domain": [d for d, _ in PROMPTS.values()],
            "prompt": [p for _, p in PROMPTS.values()],
        }
    )
    options = DecodeOptions(decoder="external", precision="bf16", attention="sdpa", max_new_tokens=MAX_NEW)
    top = [[[5, -0.25], [9, -1.5]], [[6, -0.75], [7, -0.8125]]]
    path = write(tmp_path / "lp.jsonl", [_record(logprobs=top, accepted=[1], forwards=1)])
    df, _ = ingest(path, "vllm-lp", prompts, word_tokenizer(), options, [EOS])
    row = df[df.prompt_id == "p0"].iloc[0]
    assert engine_top(row.env, 1) == top[1] and engine_top(row.env, 5) is None
    assert (row.n_prefill, row.n_verify, list(row.accepted)) == (1, 0, [1])
    # the engine emitted 6 where the reference emitted 7 at position 1: its own margin is 0.0625, one bf16
    # ulp at the logits' magnitude (0.0625 at [8, 16)), so a rounding verdict from its own pass
    logits = torch.zeros(95)
    logits[7], logits[6] = 10.0625, 10.0
    cols = judge_external(logits, 7, 6, "bf16", {"bf16": 4.0}, True, engine_top(row.env, 1))
    assert cols["verdict"] == "rounding" and cols["verify_argmax"] is True
    assert cols["verify_logit_dec"] == -0.75 and cols["verify_logit_ref"] == -0.8125 and cols["verify_margin"] == 0.0625
    # without them (a file that does not give them): the reference alone, verify columns empty
    cols = judge_external(logits, 7, 6, "bf16", {"bf16": 4.0}, True, None)
    assert cols["verify_argmax"] is None and cols["verdict"] == "rounding" and "unchecked" in cols["verdict_note"]


def test_an_engines_width_sweep_is_one_row_per_width_with_where_it_forks(tmp_path):
    """engine_widths.csv: the runs that speculated (env.speculative "METHOD k=K") get a row each, sorted by
    width within their reference and method, with the match rate against their plain run and the
    median and smallest first-divergence position of the prompts that diverged; the plain run and a
    speculative run that records no width get none."""
    teacher, prompts, ref = world(tmp_path)
    exported = export(tmp_path, teacher, prompts)
    plain = engine_run(teacher, exported)
    files = [ingest_cli(tmp_path, teacher, prompts, write(tmp_path / "plain.jsonl", plain), "eng-ar")[1]]
    forks = {}
    for name, spec in (("eng-k4", "draft_model k=4"), ("eng-k1", "draft_model k=1"), ("eng-eagle", "eagle")):
        records = [dict(r, env={**r["env"], "speculative": spec}) for r in json.loads(json.dumps(plain))]
        if name == "eng-k4":  # forks on two prompts, each in the middle of its response
            for r in records[1:3]:
                q = len(r["token_ids"]) // 2
                r["token_ids"][q] = 40 if r["token_ids"][q] != 40 else 41
                r.update(text=None, forwards=max(1, len(r["token_ids"]) // 2))
                forks[r["prompt_id"]] = q
        rc, out = ingest_cli(tmp_path, teacher, prompts, write(tmp_path / f"{name}.jsonl", records), name, "eng-ar")
        assert rc == 0
        files.append(out)
    widths = analyze([str(ref), *map(str, files)])["engine_widths.csv"]
    assert list(widths.columns) == contracts.TABLES["engine_widths.csv"]
    assert list(widths["model"]) == ["eng-k1", "eng-k4"] and list(widths["k"]) == [1, 4]
    assert set(widths["reference"]) == {"eng-ar"} and set(widths["method"]) == {"draft_model"}
    k1, k4 = widths.to_dict("records")
    assert (k1["n"], k1["match_rate"], k1["n_diverged"]) == (4, 1.0, 0) and pd.isna(k1["first_divergence_median"])
    assert (k4["n"], k4["match_rate"], k4["n_diverged"]) == (4, 0.5, 2)
    assert k4["first_divergence_median"] == sum(forks.values()) / 2 and k4["first_divergence_min"] == min(
        forks.values()
    )
    assert k4["tpf_verify"] > k1["tpf_verify"] == 1.0  # two prompts in half the forwards
