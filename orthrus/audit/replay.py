"""`orthrus replay`: one divergence rebuilt from a run's files, as a self-contained bug report.

    orthrus replay RESULTS --model M --decoder D --precision P --attention A --prompt-id ID
                   [--reference NAME] [--model-path DIR] [--reference-path DIR] [--prompts PARQUET]
                   [--top-k 10] [--device cpu] [--threads 1] [--out FILE.json]

RESULTS is a study's `results/` directory. The prompt's decoding row is read from
`RESULTS/decode/M/D-P-A.parquet` and the AR reference's from `RESULTS/decode/REF/ar-ref-P-A.parquet`
(REF: `--reference`, or the one model with such a file); each row's `env` says which options ran
(`DecodeOptions.from_row`) and which model (`model_path`, relative to the run's directory, the
parent of RESULTS; `--model-path` / `--reference-path` override it), the prompt text comes from
`RESULTS/prompts/eval.parquet`. Both trajectories are decoded again with those options
(`orthrus.decode.stage.decode_one`) and compared with the recorded ones, token by token. At the
first divergence t the two forwards that chose token t are rebuilt as the forensics stage does
(`orthrus.audit.forensics`): the reference's one-token step (`stepwise`, on the reference model, and
again in fp32 for the fp32 margin) and the decoder's own row that emitted its token: for our loop
(`orthrus`, `ar`, the `oracle` and `orthrus-lossy` controls) the verify row (`replay_verify`: the loop
rerun and traced), for transformers' decoders the logits `generate` returns for that token
(`output_logits`; `ar-batched` in the batch its run formed). The record carries the divergence's
verdict (`orthrus.audit.verdict`: tie, rounding or structural).

The JSON (default `RESULTS/replay/M/D-P-A-ID.json`) holds the prompt and its token ids, both
recorded and both replayed token lists, the divergence position and tokens, the top-k logits of
both forwards there, their top-1/top-2 margins, the per-layer hidden-state differences between the
two forwards (our loop), the verdict, the options, the numerical environment now (`numerical_env`) and as
recorded, the library versions and the exact command. A short summary is printed; exit 0 when the
replay reproduces both recorded trajectories, 1 when it does not (the record is written anyway).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from orthrus.audit.forensics import batch_of, judge, margin, replay_generate, replay_verify, row_options, stepwise
from orthrus.audit.replay_record import record, summary, token_at
from orthrus.audit.verdict import ROUNDING_ULPS
from orthrus.chat import render_chat
from orthrus.contracts import REFERENCE_DECODER
from orthrus.data.prompt_set import read_prompt_set
from orthrus.decode.stage import decode_one
from orthrus.decode.transformers_decoders import batched_generate
from orthrus.decoders import DECODER
from orthrus.errors import InputError
from orthrus.io import write_json
from orthrus.models.loading import load_draft, load_model
from orthrus.options import DecodeOptions, env_record
from orthrus.stats import as_token_list, first_divergence


def _row(path: Path, prompt_id: str):
    if not path.exists():
        raise InputError(f"no decoding result {path}")
    df = pd.read_parquet(path)
    rows = df[df["prompt_id"].astype(str) == prompt_id]
    if rows.empty:
        raise InputError(f"{path} has no prompt {prompt_id!r}")
    row = next(rows.itertuples())
    if row.finish_reason == "error":
        raise InputError(f"{path}: prompt {prompt_id!r} is an error row ({row.error})")
    return row


def reference_file(results: Path, precision: str, attention: str, reference: str | None) -> Path:
    """The AR reference's decoding result at this precision and attention."""
    name = f"{REFERENCE_DECODER}-{precision}-{attention}.parquet"
    if reference:
        return results / "decode" / reference / name
    found = sorted((results / "decode").glob(f"*/{name}"))
    if len(found) != 1:
        raise InputError(
            f"{'no' if not found else 'several'} reference files {results}/decode/*/{name}"
            + (f" ({', '.join(p.parent.name for p in found)}): pass --reference" if found else "")
        )
    return found[0]


def model_location(recorded, results: Path, override=None) -> str:
    """A model path as a row recorded it, resolved against the run's directory (RESULTS' parent)."""
    if override:
        return str(override)
    if not recorded:
        raise InputError("the decoding row records no model_path: pass the model's path")
    p = Path(recorded)
    if p.is_absolute() or not (results.parent / p).exists():
        return str(recorded)  # absolute, or a hub id
    return str(results.parent / p)


def top_k(logits: torch.Tensor, tokenizer, k: int) -> list[dict]:
    """The k largest logits, highest first, an exact tie in token order (so the first is the argmax
    greedy decoding takes: torch's argmax returns the first maximum)."""
    vals, ids = torch.topk(logits.float(), k)
    pairs = sorted(zip(vals.tolist(), ids.tolist()), key=lambda p: (-p[0], p[1]))
    return [{"token": int(i), "text": tokenizer.decode([int(i)]), "logit": float(v)} for v, i in pairs]


def _forward(logits, tokenizer, k, own: int | None, other: int | None, **extra) -> dict:
    """A forward at the divergence: its top-k logits, argmax, margin and the logits of both tokens."""
    lf = logits.float()
    return {
        "top_k": top_k(lf, tokenizer, k),
        "argmax": int(lf.argmax()),
        "margin": margin(lf),
        "logit_own_token": None if own is None else float(lf[own]),
        "logit_other_token": None if other is None else float(lf[other]),
        **extra,
    }


@dataclass
class _Side:
    """One trajectory of the divergence as its run recorded it, and what replays it: its decoding
    row and file, its options and env, its model (loaded at those options) and the prompt's ids."""

    row: object
    file: Path
    options: DecodeOptions
    env: dict
    path: str
    net: object
    tokenizer: object
    ids: list

    @property
    def recorded(self) -> list:
        return as_token_list(self.row.tokens)


def _side(row, file: Path, results: Path, override, text: str, device: str) -> _Side:
    options, env = row_options(row), env_record(row.env)
    path = model_location(env.get("model_path"), results, override)
    net, tokenizer = load_model(path, options, device)
    return _Side(row, file, options, env, path, net, tokenizer, render_chat(tokenizer, text, options.message))


def _prompt_text(prompt_file: Path, prompt_id: str) -> str:
    text = read_prompt_set(prompt_file).set_index("prompt_id")["prompt"]
    if prompt_id not in text.index:
        raise InputError(f"{prompt_file} has no prompt {prompt_id!r}")
    return text[prompt_id]


def _divergence(dec: _Side, ref: _Side, what: str, prompt_id: str) -> int:
    """The first position where the recorded trajectories part; an error where the prompt renders
    otherwise than in the run, or where they do not part."""
    if len(dec.ids) != dec.row.prompt_len:
        raise InputError(
            f"prompt {prompt_id!r} renders to {len(dec.ids)} tokens, the run had {dec.row.prompt_len}: "
            "another prompt file or tokenizer"
        )
    t = first_divergence(ref.recorded, dec.recorded)
    if t is None:
        raise InputError(f"{what} matches the reference on {prompt_id!r}: no divergence to replay")
    return t


@dataclass
class _AsRun:
    """What the decoder ran with beside its options: the draft model (assisted), the reference's
    tokens as drafts (the oracle), the batch the decode stage formed (ar-batched: the batch's
    prompt ids and the prompt's index in it)."""

    draft: object
    oracle: list | None
    batch: tuple | None


def _redecode(dec: _Side, ref: _Side, run: _AsRun) -> dict:
    """Both trajectories decoded again with their recorded options (ar-batched in its run's batch)."""
    if run.batch is not None:
        prompts = [torch.tensor(p, device=dec.net.device) for p in run.batch[0]]
        dec_tokens = batched_generate(dec.net, prompts, dec.options)[run.batch[1]].tokens
    else:
        dec_ids = torch.tensor(dec.ids, device=dec.net.device)
        dec_tokens = decode_one(dec.net, dec_ids, dec.options, run.draft, run.oracle).tokens
    ref_tokens = decode_one(ref.net, torch.tensor(ref.ids, device=ref.net.device), ref.options).tokens
    return {"decoder": as_token_list(dec_tokens), "reference": as_token_list(ref_tokens)}


def _reference_step(ref: _Side, t: int, k: int, device: str, own: int, other):
    """The reference's one-token step at t, and again in fp32 for the fp32 margin: (its forward's
    record, its logits, its per-layer hidden states)."""
    prefix = ref.recorded[:t]
    logits, hidden = stepwise(ref.net, ref.ids, prefix)
    fp32 = (
        ref.net
        if ref.options.precision == "fp32"
        else load_model(ref.path, ref.options.replace(precision="fp32"), device)[0]
    )
    logits32, _ = stepwise(fp32, ref.ids, prefix)
    forward = _forward(
        logits,
        ref.tokenizer,
        k,
        own,
        other,
        kind="step",
        margin_fp32=margin(logits32),
        top_k_fp32=top_k(logits32, ref.tokenizer, k),
    )
    return forward, logits, hidden


def _decoder_row(dec: _Side, decoder: str, t: int, k: int, own: int, other, run: _AsRun):
    """The decoder's own row that emitted its token at t: our loop's verify row (rerun and traced,
    with hidden states), or the logits transformers' generate returns for that token (none)."""
    if DECODER[decoder].runner == "loop":
        logits, hidden, emitted, blocks = replay_verify(dec.net, dec.ids, dec.options, t, run.oracle)
        extra = {"kind": "verify", "block": list(blocks[-1])}
    else:
        logits, emitted = replay_generate(dec.net, dec.ids, dec.options, t, run.draft, run.batch)
        hidden, extra = None, {"kind": "generate output_logits"}
    forward = _forward(
        logits, dec.tokenizer, k, own, other, **extra, replayed_prefix_matches=emitted == dec.recorded[: t + 1]
    )
    return forward, logits, hidden


def _layer_diffs(ref_hidden, dec_hidden) -> list | None:
    """The largest absolute difference per layer between the two forwards' hidden states."""
    if ref_hidden is None or dec_hidden is None:
        return None
    return [float((a.float() - b.float()).abs().max()) for a, b in zip(ref_hidden, dec_hidden)]


def _rows(results: Path, cell: dict, prompt_id: str, reference):
    """(file, row) of the prompt's decoding by the cell's decoder, then by the AR reference."""
    dec_file = results / "decode" / cell["model"] / "{decoder}-{precision}-{attention}.parquet".format(**cell)
    dec_row = _row(dec_file, prompt_id)
    ref_file = reference_file(results, cell["precision"], cell["attention"], reference)
    return dec_file, dec_row, ref_file, _row(ref_file, prompt_id)


def _draft(dec: _Side, decoder: str, results: Path):
    """The draft model the decoder ran with (assisted), loaded as its run recorded it; else None."""
    if not DECODER[decoder].needs_draft:
        return None
    return load_draft(model_location(dec.env.get("draft"), results), dec.net, dec.tokenizer, dec.path)


def _as_run(dec: _Side, ref: _Side, decoder: str, draft, prompt_file: Path, prompt_id: str) -> _AsRun:
    """What the decoder replays with, as it ran: its draft (assisted), the reference's tokens as
    drafts (the oracle), the batch the decode stage formed (ar-batched)."""
    oracle = ref.recorded if DECODER[decoder].takes_reference else None
    batch = None
    if DECODER[decoder].batched:
        prompts, positions = read_prompt_set(prompt_file), dec.net.config.max_position_embeddings
        batch = batch_of(prompts, dec.tokenizer, dec.options, dec.env, prompt_id, positions)
    return _AsRun(draft, oracle, batch)


def _forwards_at(t: int, dec: _Side, ref: _Side, cell: dict, run: _AsRun, replayed: dict, k, device, rounding_ulps):
    """(the two forwards that chose token t, the divergence's verdict, the per-layer hidden-state
    differences): the reference's step and the decoder's row, each where its trajectory has a
    token t; the verdict where both do, and whether the replay reproduced the run."""
    ref_tok, dec_tok = token_at(ref.recorded, t), token_at(dec.recorded, t)
    forwards, verdict = {}, None
    ref_logits = ref_hidden = dec_hidden = None
    if ref_tok is not None:
        forwards["reference"], ref_logits, ref_hidden = _reference_step(ref, t, k, device, ref_tok, dec_tok)
    if dec_tok is not None:
        forwards["decoder"], dec_logits, dec_hidden = _decoder_row(dec, cell["decoder"], t, k, dec_tok, ref_tok, run)
        if ref_logits is not None:
            consistent = forwards["decoder"]["replayed_prefix_matches"] and replayed["reference"] == ref.recorded
            verdict = judge(ref_logits, dec_logits, ref_tok, dec_tok, cell["precision"], rounding_ulps, consistent)
    return forwards, verdict, _layer_diffs(ref_hidden, dec_hidden)


def replay(
    results,
    model: str,
    decoder: str,
    precision: str,
    attention: str,
    prompt_id: str,
    reference=None,
    model_path=None,
    reference_path=None,
    prompts=None,
    k: int = 10,
    device: str = "cpu",
    rounding_ulps: float | dict = ROUNDING_ULPS,
) -> dict:
    """The replay record (see the module docstring)."""
    results = Path(results)
    cell = {"model": model, "decoder": decoder, "precision": precision, "attention": attention}
    # every file is read and checked before any model loads
    dec_file, dec_row, ref_file, ref_row = _rows(results, cell, prompt_id, reference)
    prompt_file = Path(prompts) if prompts else results / "prompts" / "eval.parquet"
    text = _prompt_text(prompt_file, prompt_id)

    dec = _side(dec_row, dec_file, results, model_path, text, device)
    draft = _draft(dec, decoder, results)
    ref = _side(ref_row, ref_file, results, reference_path, text, device)
    t = _divergence(dec, ref, f"{model}/{decoder}/{precision}/{attention}", prompt_id)
    run = _as_run(dec, ref, decoder, draft, prompt_file, prompt_id)
    replayed = _redecode(dec, ref, run)
    forwards, verdict, layers = _forwards_at(t, dec, ref, cell, run, replayed, k, device, rounding_ulps)
    return record(results, cell, prompt_id, text, prompt_file, dec, ref, t, replayed, forwards, verdict, layers)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="orthrus replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", metavar="RESULTS", help="a study's results/ directory")
    ap.add_argument("--model", required=True)
    ap.add_argument("--decoder", required=True)
    ap.add_argument("--precision", required=True)
    ap.add_argument("--attention", required=True)
    ap.add_argument("--prompt-id", required=True)
    ap.add_argument("--reference", help="the reference model's name (default: the one with an ar-ref file)")
    ap.add_argument("--model-path", help="the decoder's model (default: the path its rows record)")
    ap.add_argument("--reference-path", help="the reference model (default: the path its rows record)")
    ap.add_argument("--prompts", help="the prompt set (default: RESULTS/prompts/eval.parquet)")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="JSON (default: RESULTS/replay/MODEL/DECODER-PRECISION-ATTENTION-PROMPT.json)")
    args = ap.parse_args(argv)
    if args.top_k < 2:
        raise InputError(f"--top-k must be at least 2, got {args.top_k}")
    torch.set_num_threads(args.threads)
    rec = replay(
        args.results,
        args.model,
        args.decoder,
        args.precision,
        args.attention,
        args.prompt_id,
        args.reference,
        args.model_path,
        args.reference_path,
        args.prompts,
        args.top_k,
        args.device,
    )
    rec["command"] = shlex.join(["orthrus", "replay", *argv])
    out = (
        Path(args.out)
        if args.out
        else (
            Path(args.results)
            / "replay"
            / _safe(args.model)
            / f"{args.decoder}-{args.precision}-{args.attention}-{_safe(args.prompt_id)}.json"
        )
    )
    write_json(out, rec)
    sys.stdout.write(summary(rec, out))
    return 0 if rec["reproduced"]["all"] else 1


if __name__ == "__main__":
    sys.exit(main())
