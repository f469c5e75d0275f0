"""Evaluation and distillation prompt sets.

`orthrus prompts --config CFG [--section prompts] --eval-out eval.parquet
 --distill-out distill.parquet [--source tiny|hf] [--seed N] [--eval-per-domain N]
 [--distill-n N]`

Sources:

- `tiny`: sampled from the offline world (`orthrus.world.domains`), evaluation and
  distillation drawn from separate seed streams; distillation prompts are deduplicated
  against the evaluation set (and within themselves) by exact text.
- `hf`: the study's public datasets through `datasets.load_dataset` (hub ids or local
  files). Config (YAML/JSON), e.g.::

      source: hf
      seed: 0
      min_chars: 50
      max_chars: 1000
      eval:                       # domain -> dataset spec; n = prompts for that domain
        gec-en: {path: json, data_files: gec.jsonl, split: train, column: text, n: 90,
                 template: "Correct the grammar: {text}"}
        math:   {path: openai/gsm8k, name: main, split: test, column: question, n: 100}
      distill:                    # list of dataset specs, each with its own domain label
        - {domain: math, path: openai/gsm8k, name: main, split: train, column: question,
           n: 5000}

  A spec (orthrus/data/settings.py's `Dataset`, whose defaults these are) takes `path`, optional
  `name`, `data_files`, `split` (default `train`),
  `column` (the text column) or `template` (a `str.format` over the row's columns),
  `n`, optional `min_chars`/`max_chars` (override the global ones) and `shuffle`
  (default true: rows are taken in a seeded random order).

- `eval_file` (with either source): the evaluation set is a file in the authors' format
  `{domain: [prompt, ...]}` taken as it stands (orthrus.data.prompt_file); optional
  `eval_file_sha256` and `eval_duplicates` (error | first). With `eval_file_split: N` the file
  gives both sets: its first N prompts per domain evaluate, the rest are distillation prompts
  (`split_eval_file`).

Prompts that are empty, shorter than `min_chars` or longer than `max_chars` are dropped
and counted: one log line per domain and set on stderr (kept, dropped by reason).
Columns: `prompt_id` (unique), `domain`, `prompt` (raw user text).

Every stage reads a prompt set through `orthrus.data.prompt_set.read_prompt_set`, which checks it (columns present,
UTF-8 strings, nothing null or empty, unique ids) and names the file, row id and column of the
first problems. A prompt too long for a model (its chat-rendered tokens plus the tokens to
generate exceed the model's positions, `length_error`) is, in every decoder and in the corpus
stage alike, recorded as that row's error: never generated, never truncated.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from typing import Any

import pandas as pd

from orthrus.config import load_config, read_section
from orthrus.data.prompt_set import check_prompt_set, control_token, visible
from orthrus.data.settings import EVAL_PER_DOMAIN, HF_DISTILL_N, HF_EVAL_N, Dataset, Prompts
from orthrus.io import write_parquet


def _log(msg: str) -> None:
    print(f"[prompts] {msg}", file=sys.stderr, flush=True)


class DropCounter:
    """Counts kept and dropped prompts per domain, by reason."""

    def __init__(self):
        self.counts: dict[str, Counter] = {}

    def add(self, domain: str, reason: str) -> None:
        self.counts.setdefault(domain, Counter())[reason] += 1

    def report(self, label: str) -> dict:
        out = {}
        for domain in sorted(self.counts):
            c = self.counts[domain]
            dropped = {k: v for k, v in sorted(c.items()) if k != "kept"}
            _log(
                f"{label} {domain}: kept {c.get('kept', 0)}, dropped "
                f"{sum(dropped.values())} ({', '.join(f'{k}={v}' for k, v in dropped.items()) or 'none'})"
            )
            out[domain] = dict(sorted(c.items()))
        return out


def check_prompt(text: Any, min_chars: int, max_chars: int) -> str:
    """'kept' or the reason the prompt is dropped."""
    if text is None or not isinstance(text, str) or not visible(text):
        return "empty"
    if control_token(text):  # a chat turn of its own (orthrus.data.prompt_set): dropped and counted
        return "control_token"
    if len(text) < min_chars:
        return "too_short"
    if len(text) > max_chars:
        return "too_long"
    return "kept"


# --------------------------------------------------------------------------- tiny world


def tiny_prompts(
    seed: int = 0,
    eval_per_domain: int = EVAL_PER_DOMAIN,
    distill_n: int = 1000,
    domains: list[str] | None = None,
    min_chars: int = 1,
    max_chars: int = 1000,
    max_tries: int = 50,
):
    """(eval_df, distill_df, log) from the offline world; disjoint by prompt text."""
    from orthrus.world.domains import DOMAINS, domain_rng, sample

    domains = list(domains or DOMAINS)
    ev_drop, di_drop = DropCounter(), DropCounter()
    rows, seen = [], set()
    for d in domains:
        rng = domain_rng(seed, d, "eval")
        k, tries = 0, 0
        while k < eval_per_domain and tries < eval_per_domain * max_tries:
            tries += 1
            p, _ = sample(d, rng)
            reason = check_prompt(p, min_chars, max_chars)
            if reason == "kept" and p in seen:
                reason = "duplicate"
            ev_drop.add(d, reason)
            if reason != "kept":
                continue
            seen.add(p)
            rows.append({"prompt_id": f"{d}-{k:04d}", "domain": d, "prompt": p})
            k += 1
        if k < eval_per_domain:
            _log(f"eval {d}: only {k} distinct prompts of {eval_per_domain} requested")
    eval_df = pd.DataFrame(rows, columns=["prompt_id", "domain", "prompt"])

    # distillation: round-robin over domains, each with its own stream
    eval_texts = set(eval_df["prompt"])
    rngs = {d: domain_rng(seed, d, "distill") for d in domains}
    exhausted: set[str] = set()
    misses = Counter()
    rows, seen = [], set()
    i = 0
    while len(rows) < distill_n and len(exhausted) < len(domains):
        d = domains[i % len(domains)]
        i += 1
        if d in exhausted:
            continue
        p, _ = sample(d, rngs[d])
        reason = check_prompt(p, min_chars, max_chars)
        if reason == "kept" and p in eval_texts:
            reason = "in_eval"
        elif reason == "kept" and p in seen:
            reason = "duplicate"
        di_drop.add(d, reason)
        if reason != "kept":
            misses[d] += 1
            if misses[d] >= max_tries * 4:  # this domain has run out of fresh prompts
                exhausted.add(d)
            continue
        misses[d] = 0
        seen.add(p)
        rows.append({"prompt_id": f"distill-{len(rows):06d}", "domain": d, "prompt": p})
    if len(rows) < distill_n:
        _log(f"distill: only {len(rows)} distinct prompts of {distill_n} requested")
    distill_df = pd.DataFrame(rows, columns=["prompt_id", "domain", "prompt"])
    log = {"source": "tiny", "seed": seed, "eval": ev_drop.report("eval"), "distill": di_drop.report("distill")}
    return eval_df, distill_df, log


# --------------------------------------------------------------------------- HF datasets


def _load_rows(spec: Dataset):
    import datasets

    kwargs = {k: getattr(spec, k) for k in ("name", "data_files", "revision") if getattr(spec, k) is not None}
    return datasets.load_dataset(spec.path, split=spec.split, **kwargs)


def _row_text(row: dict, spec: Dataset):
    if spec.template:
        try:
            return spec.template.format(**row)
        except (KeyError, IndexError, ValueError):
            return None
    if spec.column not in row:
        raise KeyError(f"dataset {spec.path!r}: no column {spec.column!r} (have {sorted(row)})")
    return row[spec.column]


def _take(
    spec: Dataset,
    domain: str,
    n: int,
    seed: int,
    min_chars: int,
    max_chars: int,
    exclude: set,
    drops: DropCounter,
    prefix: str,
) -> list[dict]:
    ds = _load_rows(spec)
    order = list(range(len(ds)))
    if spec.shuffle:
        random.Random(f"{seed}|{domain}|{spec.path}|{prefix}").shuffle(order)
    lo = min_chars if spec.min_chars is None else spec.min_chars
    hi = max_chars if spec.max_chars is None else spec.max_chars
    out = []
    for idx in order:
        if len(out) >= n:
            break
        text = _row_text(ds[idx], spec)
        reason = check_prompt(text, lo, hi)
        if reason == "kept" and text in exclude:
            reason = "duplicate"
        drops.add(domain, reason)
        if reason != "kept":
            continue
        exclude.add(text)
        out.append({"domain": domain, "prompt": text})
    if len(out) < n:
        _log(f"{prefix} {domain}: only {len(out)} usable prompts of {n} requested from {spec.path!r}")
    return out


def hf_prompts(s: Prompts, seed: int = 0):
    """(eval_df, distill_df, log) from the datasets named in `s` (see module doc)."""
    min_chars, max_chars = s.min_chars, s.max_chars
    ev_drop, di_drop = DropCounter(), DropCounter()
    seen: set = set()
    rows = []
    for domain, spec in (s.eval or {}).items():
        n = spec.n or s.eval_per_domain or HF_EVAL_N
        taken = _take(spec, domain, n, seed, min_chars, max_chars, seen, ev_drop, "eval")
        rows += [{"prompt_id": f"{domain}-{k:04d}", **r} for k, r in enumerate(taken)]
    eval_df = pd.DataFrame(rows, columns=["prompt_id", "domain", "prompt"])

    rows = []
    for spec in s.distill or []:
        rows += _take(
            spec, spec.domain or spec.path, spec.n or HF_DISTILL_N, seed, min_chars, max_chars, seen, di_drop, "distill"
        )
    rows = rows[: s.distill_n]
    rows = [{"prompt_id": f"distill-{k:06d}", **r} for k, r in enumerate(rows)]
    distill_df = pd.DataFrame(rows, columns=["prompt_id", "domain", "prompt"])
    log = {
        "source": "hf",
        "seed": seed,
        "min_chars": min_chars,
        "max_chars": max_chars,
        "eval": ev_drop.report("eval"),
        "distill": di_drop.report("distill"),
    }
    return eval_df, distill_df, log


def _use_eval_file(s: Prompts, distill_df: pd.DataFrame, log: dict):
    """The evaluation set of `s.eval_file` (orthrus.data.prompt_file) in place of the source's;
    distillation prompts that appear in it are dropped, so the two sets stay disjoint."""
    from orthrus.data.prompt_file import load_eval_file

    eval_df, file_log = load_eval_file(s.eval_file, s.eval_file_sha256, s.eval_duplicates, float(s.eval_file_timeout))
    if s.eval_file_split:
        eval_df, distill_df = split_eval_file(eval_df, s.eval_file_split, s.distill_n)
        file_log["eval_file_split"] = {"eval": len(eval_df), "distill": len(distill_df)}
    clash = distill_df["prompt"].isin(set(eval_df["prompt"]))
    if clash.any():
        _log(f"distill: dropped {int(clash.sum())} prompts that are in the evaluation file")
    return eval_df, distill_df[~clash].reset_index(drop=True), {**log, **file_log}


def split_eval_file(file_df: pd.DataFrame, n_eval: int, distill_n: int | None):
    """(eval, distill) from one file's prompts: the first `n_eval` of each domain evaluate (their
    ids kept); the rest, without any text the evaluation set holds or an earlier one repeated, are
    distillation prompts taken a domain at a time in turn (a cut at `distill_n` keeps every domain)."""
    rank = file_df.groupby("domain", sort=False).cumcount()
    eval_df = file_df[rank < n_eval].reset_index(drop=True)
    rest = file_df[rank >= n_eval].assign(_rank=rank[rank >= n_eval])
    rest = rest[~rest["prompt"].isin(set(eval_df["prompt"]))].drop_duplicates("prompt")
    order = {d: i for i, d in enumerate(file_df["domain"].unique())}
    rest = rest.assign(_domain=rest["domain"].map(order)).sort_values(["_rank", "_domain"], kind="stable")
    if distill_n is not None:
        rest = rest.head(int(distill_n))
    distill_df = pd.DataFrame(
        {
            "prompt_id": [f"distill-{k:06d}" for k in range(len(rest))],
            "domain": rest["domain"].tolist(),
            "prompt": rest["prompt"].tolist(),
        }
    )
    return eval_df, distill_df


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="orthrus prompts", description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="YAML/JSON file (the `prompts` section if present)")
    ap.add_argument("--section", default="prompts", help="config key to use if present")
    ap.add_argument("--source", choices=["tiny", "hf"], help="overrides config `source`")
    ap.add_argument("--seed", type=int, help="overrides config `seed` (default 0)")
    ap.add_argument("--eval-per-domain", type=int, help="tiny: default 20")
    ap.add_argument("--distill-n", type=int, help="number of distillation prompts")
    ap.add_argument("--eval-out", required=True)
    ap.add_argument("--distill-out", required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = load_config(args.config, args.section)
    file_seed = cfg.pop("seed", 0)  # a file of its own may say `seed` (the workflow passes --seed)
    seed = file_seed if args.seed is None else args.seed
    given = {"source": args.source, "eval_per_domain": args.eval_per_domain, "distill_n": args.distill_n}
    s = read_section(Prompts, cfg | {k: v for k, v in given.items() if v is not None}, "prompts settings")
    if s.source == "tiny":
        eval_df, distill_df, log = tiny_prompts(
            seed=int(seed),
            eval_per_domain=s.eval_per_domain or EVAL_PER_DOMAIN,
            distill_n=s.distill_n,
            domains=s.domains,
            min_chars=s.min_chars,
            max_chars=s.max_chars,
        )
    else:
        eval_df, distill_df, log = hf_prompts(s, seed=int(seed))
    if s.eval_file:
        eval_df, distill_df, log = _use_eval_file(s, distill_df, log)
    # the checks every later stage applies on reading (read_prompt_set), here before writing:
    # a prompt set from the sources or the eval file that they would refuse is never written
    check_prompt_set(eval_df, f"{args.eval_out} (evaluation prompts)")
    check_prompt_set(distill_df, f"{args.distill_out} (distillation prompts)")
    assert not set(eval_df["prompt"]) & set(distill_df["prompt"])
    write_parquet(args.eval_out, eval_df)
    write_parquet(args.distill_out, distill_df)
    _log(
        f"wrote {len(eval_df)} evaluation prompts to {args.eval_out} and "
        f"{len(distill_df)} distillation prompts to {args.distill_out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
