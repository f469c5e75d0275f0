"""The decoding stage: every evaluation prompt through one model, one `DecodeOptions` per output file.

`orthrus decode --model-path DIR --model-name NAME --prompts eval.parquet --options JSON... --out F...
 [--draft-path DIR] [--shard I --num-shards N]` decodes one file per options object (one model load
each, one start-up in all); the workflow runs one job per cell and passes its options whole, built
from the config by `DecodeOptions.from_config`. By hand, `--decoder D --precision P... --attention A... [--max-new-tokens
T] [--message M] [--eos E] [--last-block L] [--prefill-logits P] [--block-size K]
[--prompt-lookup-tokens N] [--no-deterministic]` builds them instead, one per (precision, attention)
pair in precision-major order; a flag left out takes the option's default.

`ar-ref` is the plain model through transformers' `generate()` (the study's reference); `ar`
and `orthrus` load an Orthrus checkpoint and use `orthrus.generate`. The audit's controls:
`oracle` runs `orthrus.generate`'s consensus loop on the plain model with the reference's tokens
as drafts (`--reference`, the ar-ref result of each cell); `ar-batched` is `ar-ref` in
left-padded batches of `batch_size` consecutive prompts of the shard (its rows' `env` records the
shard, which decides the batches); `orthrus-lossy` is the Orthrus loop with a planted bug. `assisted` and
`prompt-lookup` are transformers' own speculative decoders on the plain model, greedy and
lossless in exact arithmetic: `generate(..., assistant_model=draft)` with the draft model of
`--draft-path` (it must share the model's tokenizer) and `generate(...,
prompt_lookup_num_tokens=k)`. A prompt that fails is recorded with its error, never dropped; a
prompt too long for the model (or for the draft) is such an error in every decoder
(`orthrus.data.prompt_set.length_error`). When more than `--max-error-share` of a run's prompts are
errors (default 0: any), the job fails naming the first ones and writes nothing.

For the transformers decoders a forward hook counts the forwards of the model (and of the
draft) and a streamer records the tokens each step emits, without touching the library's
loop. transformers' assisted loop runs the prefill and the first verification in one forward;
it is counted as the prefill (`n_prefill` 1, `n_verify` = the other forwards), so `tokens /
(n_prefill + n_verify)` is tokens per forward of the model. `accepted` holds each step's
accepted draft tokens (the first step included), `n_diffusion` the draft model's forwards
(0 for prompt lookup).

Every row's `env` holds the numerical environment, the loop that ran (`orthrus.generate` or
`transformers.generate`), the options under "options" (`DecodeOptions.record`) and, for
transformers' speculative decoders, the library settings they ran with.
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd
import torch
from tqdm import tqdm

from orthrus.chat import render_chat
from orthrus.contracts import DECODE_COLUMNS, DECODERS, PRECISIONS, REFERENCE_DECODER
from orthrus.data.prompt_set import first_per_domain, length_error, read_prompt_set
from orthrus.decode.loop import generate
from orthrus.decode.trajectory import Trajectory, decoding_row
from orthrus.decode.transformers_decoders import batched_generate, hf_generate, speculative_settings
from orthrus.decoders import DECODER
from orthrus.io import write_parquet
from orthrus.models.hub import snapshot_commit
from orthrus.models.loading import load_draft, load_model
from orthrus.models.precision import numerical_env, sdpa_backends
from orthrus.options import EOS_POLICIES, LAST_BLOCKS, PREFILL_LOGITS, DecodeOptions, OptionsError


def batches(items: list, size: int) -> list[list]:
    """The ar-batched control's batches: consecutive prompts of a shard, in the prompt set's
    order (the forensics rebuild them from the same rule)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def decode_one(model, ids: torch.Tensor, options: DecodeOptions, draft=None, reference=None) -> dict:
    """One trajectory of `options.decoder`; `draft` is assisted's draft model, `reference` the
    oracle's drafts (the prompt's reference trajectory)."""
    if DECODER[options.decoder].runner == "generate":
        return hf_generate(model, ids, options, draft)
    out = generate(model, ids, options, oracle=reference)
    return Trajectory.from_loop(out.tokens.tolist(), out.stats)


def _env(model, options: DecodeOptions, draft, draft_name, shard, per_domain, sdpa: dict) -> str:
    """The rows' `env`: the numerical environment and the run's provenance (the model as read: a hub
    snapshot's commit, pinned by the config's `revisions` or not; the ar-batched control's batching;
    `sdpa`, the SDPA kernels the cell's attention calls dispatched to, by count)."""
    run = {
        "sdpa_backends": dict(sorted(sdpa.items())),
        "loop": "transformers.generate" if DECODER[options.decoder].runner == "generate" else "orthrus.generate",
        "options": options.record(),
        "model_path": str(model.name_or_path),
        "model_commit": snapshot_commit(model.name_or_path),
    } | speculative_settings(options, model, draft, draft_name)
    if DECODER[options.decoder].batched:
        run |= {"shard": shard[0], "num_shards": shard[1], "prompts_per_domain": per_domain}
    return json.dumps(numerical_env(model) | run, sort_keys=True)


def decode_prompts(
    model,
    tokenizer,
    prompts: pd.DataFrame,
    options: DecodeOptions,
    model_name: str,
    progress: bool = True,
    draft=None,
    draft_name: str | None = None,
    reference: dict | None = None,
    shard: tuple[int, int] = (0, 1),
    per_domain: int | None = None,
) -> pd.DataFrame:
    """One row per prompt of `options`' trajectory (docs/DESIGN.md, "Decoding result").
    `reference` maps prompt ids to the reference tokens (the oracle's drafts); `shard` is (shard,
    shards) of `prompts`, and `per_domain` the prompts per domain taken before sharding, both
    recorded for the ar-batched control, whose batches they decide."""
    # the positions a prompt and its answer may take: the model's, and the draft's when it is shorter
    positions = model.config.max_position_embeddings
    if draft is not None:
        positions = min(positions, getattr(draft.config, "max_position_embeddings", positions))
    o = options
    cell = {"model": model_name, "decoder": o.decoder, "precision": o.precision, "attention": o.attention}
    lengths, done, todo = {}, {}, []
    for row in prompts.itertuples():
        ids = torch.tensor(render_chat(tokenizer, row.prompt, o.message), dtype=torch.long, device=model.device)
        lengths[row.prompt_id] = len(ids)
        error = length_error(len(ids), o.max_new_tokens, positions)
        if error is None and DECODER[o.decoder].takes_reference and (reference or {}).get(row.prompt_id) is None:
            error = f"NoReference: the {o.decoder}'s reference trajectory of this prompt is missing or an error"
        if error is None:
            todo.append((row.prompt_id, ids))
        else:
            done[row.prompt_id] = Trajectory.failed(error)
    batched = DECODER[o.decoder].batched
    size = o.batch_size if batched else 1
    with sdpa_backends() as sdpa:
        for batch in tqdm(
            batches(todo, size),
            desc=f"{model_name}/{o.decoder}/{o.precision}/{o.attention}",
            disable=not progress,
            file=sys.stderr,
        ):
            try:  # recorded, not dropped: a failing prompt is a result too
                if batched:
                    outs = batched_generate(model, [ids for _, ids in batch], o)
                else:
                    ((pid, ids),) = batch
                    outs = [decode_one(model, ids, o, draft, (reference or {}).get(pid))]
                done |= {pid: out for (pid, _), out in zip(batch, outs)}
            except Exception as e:
                done |= {pid: Trajectory.failed(f"{type(e).__name__}: {e}") for pid, _ in batch}
    env = _env(model, options, draft, draft_name, shard, per_domain, sdpa)
    rows = [
        decoding_row(cell, row.prompt_id, row.domain, lengths[row.prompt_id], env, done[row.prompt_id])
        for row in prompts.itertuples()
    ]
    return pd.DataFrame(rows, columns=DECODE_COLUMNS)


def reference_tokens(path: str, options: DecodeOptions) -> dict:
    """The oracle's drafts: prompt id -> tokens of an ar-ref decoding result at the oracle's
    precision and attention (error rows left out)."""
    ref = pd.read_parquet(path, columns=["decoder", "precision", "attention", "prompt_id", "tokens", "finish_reason"])
    cell = (REFERENCE_DECODER, options.precision, options.attention)
    wrong = ref[(ref["decoder"] != cell[0]) | (ref["precision"] != cell[1]) | (ref["attention"] != cell[2])]
    if len(wrong):
        r = wrong.iloc[0]
        raise OptionsError(
            f"--reference {path}: the oracle at {cell[1]}/{cell[2]} needs the {cell[0]} reference of "
            f"that cell, got rows of {r['decoder']}/{r['precision']}/{r['attention']}"
        )
    ok = ref[ref["finish_reason"] != "error"]
    return {pid: [int(t) for t in toks] for pid, toks in zip(ok["prompt_id"], ok["tokens"])}


# the flags that build options by hand (each sets the DecodeOptions field of its name)
_OPTION_FLAGS = (
    "decoder",
    "max_new_tokens",
    "block_size",
    "message",
    "eos",
    "last_block",
    "prefill_logits",
    "deterministic",
    "prompt_lookup_tokens",
    "batch_size",
)


def options_from_args(args) -> list[DecodeOptions]:
    """The options of each output file: `--options` as given, or built from the flags."""
    flags = {f: getattr(args, f) for f in _OPTION_FLAGS if getattr(args, f) is not None}
    if args.options:
        extra = [*flags, *(["precision"] if args.precision else []), *(["attention"] if args.attention else [])]
        if extra:
            raise OptionsError(
                f"--options holds the whole setting; drop {', '.join('--' + k.replace('_', '-') for k in extra)}"
            )
        return [DecodeOptions.from_json(j) for j in args.options]
    if "decoder" not in flags or not args.precision:
        raise OptionsError("give --options JSON..., or --decoder and --precision (and --attention, default eager)")
    return [
        DecodeOptions(precision=p, attention=a, **flags) for p in args.precision for a in args.attention or ["eager"]
    ]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="orthrus decode", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model-path",
        required=True,
        help="Orthrus checkpoint (ar, orthrus) or plain causal LM (ar-ref, assisted, prompt-lookup)",
    )
    ap.add_argument("--model-name", required=True)
    ap.add_argument("--prompts", required=True, help="evaluation prompts (Parquet: prompt_id, domain, prompt)")
    ap.add_argument("--options", nargs="+", help="one DecodeOptions JSON object per --out file (orthrus/options.py)")
    ap.add_argument("--draft-path", help="assisted: the draft model (hub id or directory), same tokenizer")
    ap.add_argument("--reference", nargs="+", help="oracle: the ar-ref decoding result of each --out file's cell")
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--num-shards", type=int, default=1)
    ap.add_argument(
        "--prompts-per-domain",
        type=int,
        default=None,
        help="decode the first N prompts of each domain only (before sharding; default: all)",
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--max-error-share",
        type=float,
        default=0.0,
        help="fail when more than this share of the prompts end in an error row (default 0)",
    )
    hand = ap.add_argument_group("options by hand (instead of --options; a flag left out takes the option's default)")
    hand.add_argument("--decoder", choices=DECODERS)
    hand.add_argument("--precision", nargs="+", choices=PRECISIONS)
    hand.add_argument("--attention", nargs="+")
    hand.add_argument("--max-new-tokens", type=int)
    hand.add_argument("--block-size", type=int)
    hand.add_argument("--message", help="none | empty | system:<text>")
    hand.add_argument("--eos", choices=EOS_POLICIES)
    hand.add_argument("--last-block", choices=LAST_BLOCKS)
    hand.add_argument("--prefill-logits", choices=PREFILL_LOGITS)
    hand.add_argument("--prompt-lookup-tokens", type=int)
    hand.add_argument("--batch-size", type=int, help="ar-batched: prompts per left-padded generate() call")
    hand.add_argument(
        "--no-deterministic",
        dest="deterministic",
        action="store_false",
        default=None,
        help="leave torch's determinism flags at their defaults",
    )
    ap.add_argument("--out", nargs="+", required=True, help="one file per options object")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    cells = options_from_args(args)
    if len(args.out) != len(cells):
        ap.error(f"{len(cells)} decoding settings need as many --out files, got {len(args.out)}")
    if any(DECODER[o.decoder].needs_draft for o in cells) != bool(args.draft_path):
        ap.error("--draft-path goes with the assisted decoder, and only with it")
    oracle = [DECODER[o.decoder].takes_reference for o in cells]
    if any(oracle) != bool(args.reference) or (args.reference and len(args.reference) != len(cells)):
        ap.error("--reference goes with the oracle decoder, one ar-ref decoding result per --out file")
    if not 0 <= args.shard < args.num_shards:
        ap.error(f"--shard {args.shard} outside 0..{args.num_shards - 1}")
    if args.prompts_per_domain is not None and args.prompts_per_domain < 1:
        ap.error(f"--prompts-per-domain must be >= 1, got {args.prompts_per_domain}")
    torch.set_num_threads(args.threads)
    prompts = first_per_domain(read_prompt_set(args.prompts), args.prompts_per_domain).iloc[
        args.shard :: args.num_shards
    ]
    for i, (options, out) in enumerate(zip(cells, args.out)):
        model, tokenizer = load_model(args.model_path, options, args.device)
        draft = (
            load_draft(args.draft_path, model, tokenizer, args.model_path)
            if DECODER[options.decoder].needs_draft
            else None
        )
        reference = reference_tokens(args.reference[i], options) if args.reference else None
        df = decode_prompts(
            model,
            tokenizer,
            prompts,
            options,
            args.model_name,
            progress=not args.no_progress,
            draft=draft,
            draft_name=args.draft_path,
            reference=reference,
            shard=(args.shard, args.num_shards),
            per_domain=args.prompts_per_domain,
        )
        failed = df[df["finish_reason"] == "error"]
        cell = f"{options.decoder}/{options.precision}/{options.attention}"
        if len(failed) > args.max_error_share * len(df):
            first = "; ".join(f"{r.prompt_id}: {r.error}" for r in failed.head(3).itertuples())
            print(
                f"orthrus decode: {cell}: {len(failed)} of {len(df)} prompts failed, more than "
                f"--max-error-share {args.max_error_share}; first: {first}",
                file=sys.stderr,
            )
            return 1
        write_parquet(out, df)
        print(f"[decode] {cell}: {len(df)} prompts ({len(failed)} errors) -> {out}", file=sys.stderr)
    return 0
