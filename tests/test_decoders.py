"""The decoder table (orthrus/decoders.py) is the one place a decoder is described: its rows are
consistent, the vocabularies every stage reads come from it, and the config's choices follow it."""

import pytest

from orthrus import contracts
from orthrus.decoders import DECODER, DIFFUSION_DECODER, MODELS, PLANTED, ROLES, RUNNERS, TABLE, names
from orthrus.options import DecodeOptions, OptionsError
from orthrus.plan.config.generate import schema

DECODE = schema()["$defs"]["Decode"]


def test_every_row_is_one_decoder_with_known_attributes():
    assert len(DECODER) == len(TABLE) and names(role="reference") == (contracts.REFERENCE_DECODER,)
    for d in TABLE:
        assert d.role in ROLES and d.runner in RUNNERS and d.model in MODELS, d
        assert (d.runner == "engine") == (d.model == "engine"), d
        for field, _ in d.own_options:
            assert field in DecodeOptions.__dataclass_fields__, d
    with pytest.raises(KeyError, match="no decoder attribute colour"):
        names(colour="red")


def test_the_vocabularies_are_the_tables_columns():
    assert contracts.DECODERS == tuple(d.name for d in TABLE)
    assert (
        set(contracts.CONTROLS)
        == {d.name for d in TABLE if d.role == "control"}
        == {
            "oracle",
            "ar-batched",
            "orthrus-lossy",
        }
    )
    assert set(contracts.SPECULATIVE) == {"orthrus", "assisted", "prompt-lookup", "external"}
    assert set(contracts.HF_DECODERS) == {"ar-ref", "assisted", "prompt-lookup", "ar-batched"}
    assert set(contracts.LOOP_DECODERS) == {"ar", "orthrus", "oracle", "orthrus-lossy"}
    assert set(contracts.MODEL_DECODERS) == {"ar", "orthrus", "orthrus-lossy"}
    assert contracts.REFERENCE_DECODER not in contracts.COMPARED_DECODERS
    assert [d.name for d in TABLE if not d.lossless] == ["orthrus-lossy"]
    assert set(names(diffusion=True)) == {"orthrus", "orthrus-lossy"}
    # the config's choices are the table's
    assert set(DECODE["properties"]["controls"]["items"]["enum"]) == set(contracts.CONTROLS)
    assert set(DECODE["properties"]["decoders"]["items"]["enum"]) == {"assisted", "prompt-lookup"}


def test_lm_evals_decodings_are_the_tables_baselines_and_its_loop_speculator():
    """lm-eval runs the reference, a model's own AR view and the Orthrus loop, read from the table's
    roles and runners; the controls and engine files stay the audit's."""
    from orthrus.lmeval.lm import DECODINGS

    assert set(DECODINGS) == {"ar-ref", "ar", "orthrus"}


def test_a_decoders_own_options_come_from_its_own_keys_and_no_other_decoder_takes_them():
    section = {"max_new_tokens": 16, "noise_batch_size": 4, "oracle_block_size": 3, "prompt_lookup_tokens": 5}
    assert DecodeOptions.from_config(section, "ar-batched", "fp32", "eager").batch_size == 4
    assert DecodeOptions.from_config(section, "oracle", "fp32", "eager").block_size == 3
    assert DecodeOptions.from_config(section, "prompt-lookup", "fp32", "eager").prompt_lookup_tokens == 5
    plain = DecodeOptions.from_config(section, "ar-ref", "fp32", "eager")
    assert (plain.batch_size, plain.prompt_lookup_tokens) == (1, DecodeOptions.prompt_lookup_tokens)
    with pytest.raises(OptionsError, match="batch_size is the ar-batched control's"):
        DecodeOptions(decoder="orthrus", batch_size=4)
    with pytest.raises(OptionsError, match="the oracle control is greedy"):
        DecodeOptions(decoder="oracle", temperature=0.7)


def test_one_writer_makes_every_decoding_row_from_a_trajectory_record():
    """decode.trajectory.decoding_row is the one place a decoding result's row is made: the columns in
    contracts' order, a failed prompt's record with no tokens and its error, and a record that lacks
    a column refused rather than written short."""
    from orthrus.decode.trajectory import Trajectory, decoding_row, finish_reason

    cell = {"model": "m", "decoder": "orthrus", "precision": "fp32", "attention": "sdpa"}
    done = Trajectory(
        [5, 6, 1], n_prefill=1, n_verify=1, n_diffusion=1, accepted=[1], finish_reason=finish_reason([5, 6, 1], {1})
    )
    row = decoding_row(cell, "p0", "d", 7, "{}", done)
    assert list(row) == contracts.DECODE_COLUMNS and row["finish_reason"] == "eos" and row["error"] is None
    failed = decoding_row(cell, "p1", "d", 7, "{}", Trajectory.failed("Boom: no"))
    assert (failed["tokens"], failed["finish_reason"], failed["error"], failed["n_verify"]) == (
        [],
        "error",
        "Boom: no",
        0,
    )
    assert finish_reason([5, 6], {1}) == "length" and finish_reason([], {1}) == "length"
    with pytest.raises(KeyError, match="without model"):
        decoding_row({k: v for k, v in cell.items() if k != "model"}, "p0", "d", 7, "{}", done)


def test_the_loops_step_and_acceptance_rule_are_the_rows():
    from orthrus.decode.loop import _ar_step, _oracle_step, _orthrus_step, _step

    assert {n: _step(DECODER[n]) for n in contracts.LOOP_DECODERS} == {
        "ar": _ar_step,
        "orthrus": _orthrus_step,
        "oracle": _oracle_step,
        "orthrus-lossy": _orthrus_step,
    }
    # a planted bug is an acceptance rule other than the honest one: the one row not lossless
    planted = {d.name for d in TABLE if (d.accept_top, d.ratio_temperature) != (1, None)}
    assert planted == {d.name for d in TABLE if not d.lossless} == {PLANTED} == {"orthrus-lossy"}
    assert DIFFUSION_DECODER == "orthrus" and DECODER[PLANTED].diffusion
