"""Why trajectories diverge: the reference's logit margin and the layer where the bits part.

At each first divergence t between an Orthrus trajectory and the AR reference, the token
Orthrus emitted came from a multi-token verify block, and the reference token from a
one-token-per-forward step. This module recomputes both at that position:

- token by token: prefill the prompt, then feed the shared prefix one token at a time;
- block verify: the Orthrus loop itself (`orthrus.generate`) rerun with the options the row
  recorded (`DecodeOptions.from_row`), traced until the verify pass whose rows emitted token t;
  same model, options and kernel give the same proposals, blocks and cache, so the replay is
  the run (`replay_consistent` says whether it reproduced every token up to t).

It records the reference's top-1/top-2 margin in its own precision and in fp32, the largest
hidden-state difference between the two computations after every layer, and a verdict
(`orthrus.audit.verdict`: tie, rounding or structural) from the logits of the two tokens in the
reference's step and in the decoder's own pass.

An engine's file (decoder `external`, `orthrus ingest`) is explained by the reference model
alone, the teacher: its margins at the divergence as above, but the engine's own pass is not in the
file, so the verify columns stay empty, `replay_consistent` says whether the reference model picks
the compared trajectory's token there, and the verdict rests on the reference's gap
(`orthrus.audit.verdict.external_verdict`). Its reference file is the ar-ref of its cell or, for an engine
pair, the engine's own plain run.

The controls (`orthrus.contracts.CONTROLS`) are replayed like the loop: `orthrus-lossy` is the
loop, `oracle` the loop with the reference's tokens as drafts. transformers' decoders (`assisted`,
`prompt-lookup`, the `ar-batched` control) run on the teacher; for them the model is the teacher,
the decoder's pass is replayed by generate itself with `output_logits` (the logits it returns for
each emitted token are its verify rows), and `ar-batched` in the batch the decode stage formed
(rebuilt from the shard the row records). Their draft lengths and hidden states are not exposed,
so `first_layer_diverging` and the hidden-state differences are our loop's only. Column
`orthrus_token` holds the compared decoder's token.

`orthrus forensics --model-path DIR --prompts eval.parquet --decoded DEC.parquet... --reference
 REF.parquet... --out F`: decoded and reference files pair up in order; each pair is one (decoder,
precision, attention), read from the files with the options each row records; `--model-path` is the Orthrus model
for `orthrus` files, the teacher for the transformers decoders. A model is loaded only where there
is a divergence.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch
from tqdm import tqdm
from transformers import DynamicCache

from orthrus.audit.verdict import (
    ROUNDING_ULPS,
    arithmetic_precision,
    engine_verdict,
    external_verdict,
    gap_ulps,
    rounding_ulps_arg,
    verdict,
)
from orthrus.chat import render_chat
from orthrus.contracts import FORENSICS_COLUMNS
from orthrus.data.prompt_set import first_per_domain, length_error, read_prompt_set
from orthrus.decode.loop import generate
from orthrus.decode.stage import batches
from orthrus.decode.transformers_decoders import batched_generate, hf_generate
from orthrus.decoders import DECODER
from orthrus.io import write_parquet
from orthrus.models.cache import cache_kwarg
from orthrus.models.loading import load_draft, load_model
from orthrus.options import DecodeOptions, env_record
from orthrus.stats import first_divergence


def margin(logits: torch.Tensor) -> float:
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])


def _forward(model, ids, cache):
    out = model(
        input_ids=torch.tensor(ids, device=model.device)[None],
        **cache_kwarg(model, cache),
        use_cache=True,
        output_hidden_states=True,
    )
    return out.logits[0], [h[0] for h in out.hidden_states]


@torch.inference_mode()
def stepwise_at(model, prompt: list[int], tokens: list[int], positions) -> dict:
    """{t: (logits, per-layer hidden states)} of the row that predicts token t of `tokens`, for
    each t of `positions`, one token per forward: one pass serves every divergence of a prompt
    (step t computes what it would after any later stop)."""
    want, out = set(positions), {}
    cache = DynamicCache(config=model.config)
    logits, hidden = _forward(model, prompt, cache)
    for t in range(max(want) + 1):
        if t:
            logits, hidden = _forward(model, [tokens[t - 1]], cache)
        if t in want:
            out[t] = logits[-1], [h[-1] for h in hidden]
    return out


def stepwise(model, prompt: list[int], prefix: list[int]):
    """Logits and per-layer hidden states at the last position, one token per forward."""
    return stepwise_at(model, prompt, prefix, [len(prefix)])[len(prefix)]


def reference_steps(model, model32, tokenizer, prompts, cases) -> dict:
    """{(prompt id, message, t): (logits, hidden states, fp32 logits)} of the reference, step by
    step, at every divergence of `cases`: one pass per prompt and precision, whichever decoders
    parted there (`model32` may be `model`)."""
    text = prompts.set_index("prompt_id")["prompt"]
    want, tokens = {}, {}
    for o, r_tokens, _, t in cases:
        key = (o.prompt_id, row_options(o).message)
        want.setdefault(key, set()).add(t)
        tokens[key] = r_tokens
    out = {}
    for (pid, message), ts in want.items():
        prompt = render_chat(tokenizer, text[pid], message)
        native = stepwise_at(model, prompt, tokens[(pid, message)], ts)
        fp32 = native if model32 is model else stepwise_at(model32, prompt, tokens[(pid, message)], ts)
        out |= {(pid, message, t): (*native[t], fp32[t][0]) for t in ts}
    return out


def replay_verify(model, prompt: list[int], options: DecodeOptions, t: int, oracle: list[int] | None = None):
    """The loop run with `options` (the oracle's with its drafts `oracle`), replayed until
    generated token `t`: (logits and per-layer hidden states of the AR-view row that produced
    it, the tokens the replay emitted up to it, the replay's blocks as (kind, tokens read, tokens
    emitted) per forward)."""
    blocks, last = [], None

    def trace(forward, tokens):
        nonlocal last
        blocks.append((forward.kind, len(forward.input_ids), forward.emitted))
        last = forward  # only the last forward's logits and hidden states are kept
        return forward.first + forward.emitted > t

    ids = torch.tensor(prompt, device=model.device)
    out = generate(model, ids, options, trace=trace, hidden_states=True, oracle=oracle)
    i = t - last.first
    if not 0 <= i < len(last.logits):
        raise RuntimeError(f"the replay ended after {len(out.tokens)} tokens, before token {t}")
    return last.logits[i], [h[i] for h in last.hidden], out.tokens.tolist()[: t + 1], blocks


def replay_generate(model, prompt: list[int], options: DecodeOptions, t: int, draft=None, batch=None):
    """transformers' decoders replayed with the logits generate returns (`output_logits`): (the
    logits row of generated token `t`, the tokens the replay emitted up to it). `batch` is the
    ar-batched control's batch as (the prompts' ids, this prompt's index in it)."""
    if DECODER[options.decoder].batched:
        prompts, i = batch
        rows, logits = batched_generate(
            model, [torch.tensor(p, device=model.device) for p in prompts], options, logits=True, stop_after=t + 1
        )
        row, logits = rows[i], [x[i] for x in logits]
    else:
        row, logits = hf_generate(
            model, torch.tensor(prompt, device=model.device), options, draft, logits=True, stop_after=t + 1
        )
    if t >= len(logits):
        raise RuntimeError(f"the replay ended after {len(logits)} tokens, before token {t}")
    return logits[t], row.tokens[: t + 1]


def row_options(row) -> DecodeOptions:
    return DecodeOptions.from_row(getattr(row, "env", None), row.decoder, row.precision, row.attention)


def divergences(orth: pd.DataFrame, ref: pd.DataFrame):
    """(Orthrus row, reference tokens, Orthrus tokens, first divergence) for every diverging prompt."""
    ref = ref[ref.finish_reason != "error"].set_index("prompt_id")
    for o in orth[orth.finish_reason != "error"].itertuples():
        if o.prompt_id not in ref.index:
            continue
        r_tokens = [int(x) for x in ref.at[o.prompt_id, "tokens"]]
        o_tokens = [int(x) for x in o.tokens]
        t = first_divergence(r_tokens, o_tokens)
        if t is not None and t < min(len(r_tokens), len(o_tokens)):
            yield o, r_tokens, o_tokens, t


def batch_of(prompts: pd.DataFrame, tokenizer, options: DecodeOptions, env: dict, prompt_id: str, positions: int):
    """The ar-batched control's batch of `prompt_id`, rebuilt as the decode stage built it
    (`orthrus.decode.stage.batches` over the prompts of the row's shard, of its prompts per
    domain, that fit): (the prompts' ids, its index in the batch)."""
    shard = first_per_domain(prompts, env.get("prompts_per_domain")).iloc[
        env.get("shard", 0) :: env.get("num_shards", 1)
    ]
    todo = [(pid, render_chat(tokenizer, p, options.message)) for pid, p in zip(shard["prompt_id"], shard["prompt"])]
    todo = [(pid, ids) for pid, ids in todo if length_error(len(ids), options.max_new_tokens, positions) is None]
    for batch in batches(todo, options.batch_size):
        ids = [pid for pid, _ in batch]
        if prompt_id in ids:
            return [p for _, p in batch], ids.index(prompt_id)
    raise RuntimeError(f"prompt {prompt_id} is not in any batch of its shard")


def analyse(
    model,
    model32,
    tokenizer,
    prompts,
    cases,
    max_ulps: float | dict = ROUNDING_ULPS,
    draft=None,
    steps: dict | None = None,
) -> list[dict]:
    """One row per case, with its verdict; the block replay and hidden states for our loop's
    decoders only (see the module docstring). `steps`: `reference_steps` of these cases, computed
    here when not given."""
    text = prompts.set_index("prompt_id")["prompt"]
    steps = reference_steps(model, model32, tokenizer, prompts, cases) if steps is None else steps
    rows = []
    for o, r_tokens, o_tokens, t in tqdm(cases, desc="forensics", file=sys.stderr):
        options = row_options(o)
        step_logits, step_hidden, step32 = steps[(o.prompt_id, options.message, t)]
        row = _case_row(o, t, r_tokens[t], o_tokens[t], step_logits, step32)
        if DECODER[o.decoder].runner == "engine":  # an engine's file: nothing to replay (see judge_external)
            top = engine_top(o.env, t)
            rounds = arithmetic_precision(o.precision, env_record(o.env).get("engine_env"))
            verdict = judge_external(
                step_logits, r_tokens[t], o_tokens[t], o.precision, max_ulps, row["replay_consistent"], top, rounds
            )
        else:
            prompt = render_chat(tokenizer, text[o.prompt_id], options.message)
            ver_logits, replayed, hidden = _replay_case(
                model, tokenizer, prompts, o, prompt, options, t, r_tokens, step_hidden, draft
            )
            # the replay reproduces the run when the step-by-step row picks the reference's token and
            # the decoder re-emits the run's tokens up to and including the divergence
            consistent = row["replay_consistent"] and replayed == o_tokens[: t + 1]
            row |= hidden | {"verify_margin": margin(ver_logits), "replay_consistent": consistent}
            verdict = judge(step_logits, ver_logits, r_tokens[t], o_tokens[t], o.precision, max_ulps, consistent)
        rows.append(row | verdict)
    return rows


def _case_row(o, t: int, ref_token: int, orthrus_token: int, step_logits, step32) -> dict:
    """A case's row before its replay: which run, where it parted from the reference, and the
    step-by-step reference's margins there (native and fp32) and whether it picks its own token."""
    return {
        "model": o.model,
        "decoder": o.decoder,
        "precision": o.precision,
        "attention": o.attention,
        "prompt_id": o.prompt_id,
        "domain": o.domain,
        "position": t,
        "ref_token": ref_token,
        "orthrus_token": orthrus_token,
        "margin_native": margin(step_logits),
        "margin_fp32": margin(step32),
        "verify_margin": None,
        "first_layer_diverging": None,
        "max_abs_hidden_diff": [],
        "replay_consistent": int(step_logits.argmax()) == ref_token,
    }


def _replay_case(model, tokenizer, prompts, o, prompt: list[int], options, t: int, r_tokens, step_hidden, draft):
    """(verify logits at `t`, the tokens replayed through `t`, the hidden-state columns) of the case's
    decoder run again: our loop's verify block, its hidden states against the step-by-step
    reference's; a transformers decoder re-run (a batched one in its batch), no hidden states."""
    decoder = DECODER[o.decoder]
    if decoder.runner == "loop":
        oracle = r_tokens if decoder.takes_reference else None
        ver_logits, ver_hidden, replayed, _ = replay_verify(model, prompt, options, t, oracle)
        return ver_logits, replayed, _hidden_diffs(step_hidden, ver_hidden)
    batch = None
    if decoder.batched:
        positions = model.config.max_position_embeddings
        batch = batch_of(prompts, tokenizer, options, env_record(o.env), o.prompt_id, positions)
    ver_logits, replayed = replay_generate(model, prompt, options, t, draft, batch)
    return ver_logits, replayed, {}


def _hidden_diffs(step_hidden, ver_hidden) -> dict:
    """Per layer, the largest absolute difference of the verify block's hidden state from the
    step-by-step reference's, and the first layer where they differ (None: none does)."""
    diffs = [float((a.float() - b.float()).abs().max()) for a, b in zip(step_hidden, ver_hidden)]
    return {
        "max_abs_hidden_diff": diffs,
        "first_layer_diverging": next((i for i, d in enumerate(diffs) if d > 0), None),
    }


def judge(
    step_logits, ver_logits, ref_token: int, token: int, precision: str, max_ulps: float | dict, consistent: bool
) -> dict:
    """The verdict columns of one divergence (`orthrus.audit.verdict`): the four logits, whether the
    decoder's token is its own pass's argmax, the reference's gap in ulps, the verdict."""
    step, ver = step_logits.float(), ver_logits.float()
    logits = {
        "ref_logit_ref": float(step[ref_token]),
        "ref_logit_dec": float(step[token]),
        "verify_logit_ref": float(ver[ref_token]),
        "verify_logit_dec": float(ver[token]),
    }
    argmax = bool(ver[token] >= ver.max())
    gap = gap_ulps(logits["ref_logit_ref"], logits["ref_logit_dec"], precision)
    if consistent:
        v, note = verdict(
            logits["ref_logit_ref"],
            logits["ref_logit_dec"],
            logits["verify_logit_dec"],
            float(ver.max()),
            precision,
            max_ulps,
        )
    else:
        v, note = None, "the replay does not reproduce the run (see replay_consistent)"
    return logits | {"verify_argmax": argmax, "gap_ulps": gap, "verdict": v, "verdict_note": note}


def judge_external(
    step_logits,
    ref_token: int,
    token: int,
    precision: str,
    max_ulps: float | dict,
    reproduced: bool,
    top: list | None = None,
    rounds: str | None = None,
) -> dict:
    """The verdict columns of a divergence of an engine's file: the reference's two logits, and,
    where the file gives the engine's own top-2 log-probabilities at the position (`top`), the
    engine's as its verify columns (log-probabilities: their differences are the logits') and
    `orthrus.audit.verdict.engine_verdict`; without them the verify columns stay empty and the
    verdict is `external_verdict`'s, from the reference alone. `rounds`: the precision whose bound the
    verdict takes where the engine's arithmetic rounds coarser than `precision` (`arithmetic_precision`);
    `gap_ulps` stays in `precision`'s ulps, as every row of the cell's."""
    step = step_logits.float()
    rounds = rounds or precision
    logits = {"ref_logit_ref": float(step[ref_token]), "ref_logit_dec": float(step[token])}
    gap = gap_ulps(logits["ref_logit_ref"], logits["ref_logit_dec"], precision)
    nan = float("nan")
    if top is None:
        v, note = external_verdict(logits["ref_logit_ref"], logits["ref_logit_dec"], rounds, max_ulps, reproduced)
        return logits | {
            "verify_logit_ref": nan,
            "verify_logit_dec": nan,
            "verify_margin": nan,
            "verify_argmax": None,
            "gap_ulps": gap,
            "verdict": v,
            "verdict_note": _rounds_note(note, rounds, precision),
        }
    lp = {int(t): float(x) for t, x in top}
    v, note = engine_verdict(
        top, token, ref_token, logits["ref_logit_ref"], logits["ref_logit_dec"], rounds, max_ulps, reproduced
    )
    return logits | {
        "verify_logit_ref": lp.get(ref_token, nan),
        "verify_logit_dec": lp.get(token, nan),
        "verify_margin": float(top[0][1]) - float(top[1][1]),
        "verify_argmax": token in lp and lp[token] >= max(lp.values()),
        "gap_ulps": gap,
        "verdict": v,
        "verdict_note": _rounds_note(note, rounds, precision),
    }


def _rounds_note(note: str, rounds: str, precision: str) -> str:
    return note if rounds == precision else f"{note} [in {rounds}'s ulps: the engine's arithmetic rounds to {rounds}]"


def engine_top(env, t: int) -> list | None:
    """The engine's own top log-probabilities at generated position `t`, where its file gave them
    (`orthrus ingest` keeps them in the row's env as `engine_logprobs`)."""
    top = env_record(env).get("engine_logprobs")
    return (top[t] or None) if isinstance(top, list) and t < len(top) else None  # [] : none reported there


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus forensics", description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument(
        "--decoded",
        nargs="+",
        required=True,
        help="decoding results to explain: the Orthrus decoder's, or transformers' speculative decoders'",
    )
    ap.add_argument("--reference", nargs="+", required=True, help="the AR reference's, same order")
    ap.add_argument("--max-cases", type=int, default=1000, help="per (precision, attention)")
    ap.add_argument(
        "--rounding-ulps",
        type=rounding_ulps_arg,
        default=dict(ROUNDING_ULPS),
        help="the largest reference margin, in ulps, that a `rounding` verdict accepts: one number or "
        "precision=ulps,... (orthrus/audit/verdict.py)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if len(args.decoded) != len(args.reference):
        ap.error("--decoded and --reference need the same number of files")
    torch.set_num_threads(args.threads)
    prompts = read_prompt_set(args.prompts)
    pairs = [
        (ref_file, list(divergences(pd.read_parquet(dec_file), pd.read_parquet(ref_file)))[: args.max_cases])
        for dec_file, ref_file in zip(args.decoded, args.reference)
    ]
    # the reference's steps are the same for every decoder compared with one reference file (one
    # model, precision and kernel): computed once, at the divergences of all of them
    steps, rows = {}, []
    for ref_file, cases in pairs:
        if not cases:
            continue
        options = row_options(cases[0][0])  # the model as the run loaded it; transformers' decoders: the teacher
        model, tokenizer = load_model(args.model_path, options, args.device)
        model32 = (
            model
            if options.precision == "fp32"
            else load_model(args.model_path, options.replace(precision="fp32"), args.device)[0]
        )
        draft_path = env_record(cases[0][0].env).get("draft")
        draft = (
            load_draft(draft_path, model, tokenizer, args.model_path) if DECODER[options.decoder].needs_draft else None
        )
        if ref_file not in steps:
            steps[ref_file] = reference_steps(
                model, model32, tokenizer, prompts, [c for f, cs in pairs if f == ref_file for c in cs]
            )
        rows += analyse(model, model32, tokenizer, prompts, cases, args.rounding_ulps, draft, steps[ref_file])
    df = pd.DataFrame(rows, columns=FORENSICS_COLUMNS)
    write_parquet(args.out, df)
    print(
        f"[forensics] {len(df)} divergences, replay consistent on {int(df['replay_consistent'].sum())}", file=sys.stderr
    )
    return 0
