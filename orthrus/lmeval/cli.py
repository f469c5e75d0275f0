"""`orthrus lm-eval <sub>` (also `python -m orthrus.lmeval <sub>`): prepare-data, run, table, cli.

The subcommands and their options are listed in the `orthrus.lmeval` docstring."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orthrus.contracts import PRECISIONS, PRIMARY_METRICS
from orthrus.errors import InputError
from orthrus.io import atomic_path, write_json
from orthrus.lmeval.lm import DECODINGS
from orthrus.lmeval.run import evaluate
from orthrus.lmeval.tables import make_tables, result_rows
from orthrus.options import DecodeOptions


def _gen_cap(v: str) -> int | None:
    """`--max-gen-toks`: a positive cap, or 'task' (None: each task's own generation length)."""
    if v == "task":
        return None
    if int(v) < 1:
        raise argparse.ArgumentTypeError("a positive integer or 'task'")
    return int(v)


def _split(s: str | None) -> list[str]:
    """A comma-separated option as a list, blanks dropped."""
    return [t.strip() for t in (s or "").split(",") if t.strip()]


def _doc_counts(spec: str, tasks: list[str]) -> dict[str, int]:
    """`--n`: one count for every task ("150"), or one per task ("tiny_arith=450,tiny_code=150"),
    which must name each task prepared and no other."""

    def count(text, what):
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise InputError(f"--n: {what} must be a positive whole number of documents, got {text!r}")
        return n

    if "=" not in spec:
        return dict.fromkeys(tasks, count(spec.strip(), "the count"))
    pairs = [part.partition("=") for part in spec.split(",") if part.strip()]
    counts = {name.strip(): count(n.strip(), f"the count of {name.strip()}") for name, _, n in pairs}
    missing, extra = [t for t in tasks if t not in counts], [t for t in counts if t not in tasks]
    if missing or extra:
        raise InputError(
            f"--n {spec}: a count per task needs one for each task prepared ({', '.join(tasks)}); "
            + "; ".join(
                ([f"missing {', '.join(missing)}"] if missing else [])
                + ([f"not prepared: {', '.join(extra)}"] if extra else [])
            )
        )
    return counts


def cmd_prepare_data(args) -> int:
    from orthrus.world import tiny_tasks

    tasks = _split(args.tasks) or list(tiny_tasks.TASKS)
    exclude = set()
    for p in args.exclude or []:
        from orthrus.data.prompt_set import read_prompt_set

        exclude |= set(read_prompt_set(p)["prompt"])
    out = Path(args.out).resolve()
    counts = _doc_counts(args.n, tasks)
    manifest = {
        "seed": args.seed,
        "n": counts,
        "stream": tiny_tasks.STREAM,
        "tasks": {},
        "excluded_prompt_sets": args.exclude or [],
    }
    with atomic_path(out) as tmp:
        tmp.mkdir()
        for task in tasks:
            docs = tiny_tasks.make_docs(task, counts[task], seed=args.seed, exclude=exclude)
            if len(docs) < counts[task]:
                print(f"[lm-eval] {task}: only {len(docs)} distinct documents of {counts[task]}", file=sys.stderr)
            tiny_tasks.write_task(tmp, task, docs, final_dir=out)
            manifest["tasks"][task] = {
                "n": len(docs),
                "domain": tiny_tasks.TASKS[task],
                "data": f"{task}.jsonl",
                "yaml": f"{task}.yaml",
                "primary_metrics": PRIMARY_METRICS.get(task, []),
            }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"[lm-eval] wrote {', '.join(tasks)} to {out} (use --include-path {out})", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rec = evaluate(
        args.model_path,
        options=args.options,
        decoding=args.decoding,
        precision=args.precision,
        attention=args.attention,
        tasks=_split(args.tasks),
        include_paths=args.include_path or [],
        limit=args.limit,
        num_fewshot=args.num_fewshot,
        max_gen_toks=args.max_gen_toks,
        chat_template=args.chat_template,
        device=args.device,
        batch_size=args.batch_size,
        bootstrap_iters=args.bootstrap_iters,
        allow_code_eval=args.allow_code_eval,
        seed=args.seed,
        raw_tasks=_split(args.no_chat_template_tasks),
    )
    rec = {"model": args.model_name or Path(str(args.model_path).rstrip("/")).name, **rec}
    write_json(args.out, rec)
    for row in result_rows(rec):
        if row["primary"]:
            print(
                f"[lm-eval] {rec['model']} {rec['decoder']} {rec['precision']} {row['task']} {row['metric']}: "
                f"{row['value']:.4f} +- {row['stderr']:.4f}",
                file=sys.stderr,
            )
    return 0


def cmd_table(args) -> int:
    written = make_tables(args.inputs, args.out, args.agreement_out, args.figure, args.reference)
    for p in written:
        print(p)
    return 0


def cmd_cli(argv) -> int:
    """lm-eval's own command line, with the `orthrus` model registered (this module imports `lm`)."""
    from lm_eval.__main__ import cli_evaluate

    saved = sys.argv
    sys.argv = ["lm-eval", *argv]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0


def build_parser() -> argparse.ArgumentParser:
    import orthrus.lmeval as stage

    ap = argparse.ArgumentParser(prog="orthrus lm-eval", description=stage.__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("prepare-data", help="tiny-world task data + lm-eval YAMLs into a directory")
    p.add_argument("--out", required=True, help="directory (written atomically; pass it as --include-path)")
    p.add_argument("--n", default="40", help="documents per task: one count, or TASK=N,... for each task")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tasks", help="comma-separated subset of tiny_arith,tiny_gec,tiny_qa,tiny_code,tiny_translate (default: all)"
    )
    p.add_argument("--exclude", nargs="*", help="prompt-set Parquet files whose prompts must not be used")
    p.set_defaults(func=cmd_prepare_data)

    p = sub.add_parser("run", help="evaluate one model x decoder x precision x attention")
    p.add_argument("--model-path", required=True)
    p.add_argument("--model-name", help="name in the tables (default: the path's last component)")
    p.add_argument(
        "--options",
        help="the run's DecodeOptions as JSON (orthrus/options.py), as the decode stage gets "
        "them; --decoding, --precision and --attention replace its fields",
    )
    p.add_argument("--decoding", choices=DECODINGS)
    p.add_argument("--precision", choices=PRECISIONS)
    p.add_argument("--attention", help="eager | sdpa | flash_attention_2")
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval task names")
    p.add_argument("--include-path", action="append", help="extra task directory (repeatable)")
    p.add_argument("--limit", type=float, help="documents per task (lm-eval --limit; <1 = fraction)")
    p.add_argument("--num-fewshot", type=int, default=0)
    p.add_argument(
        "--max-gen-toks",
        type=_gen_cap,
        default=DecodeOptions.max_new_tokens,
        help="generation cap per request (default: the decoding options' max_new_tokens), or 'task' for "
        "each task's own max_gen_toks",
    )
    p.add_argument(
        "--chat-template",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="render prompts as the trajectory study does (render_chat); default on",
    )
    p.add_argument(
        "--no-chat-template-tasks",
        help="comma-separated tasks given plain completion prompts even with the chat template "
        "(e.g. humaneval; or use humaneval_instruct with the chat template)",
    )
    p.add_argument("--device", help="cpu | cuda (default: cuda if available)")
    p.add_argument("--batch-size", type=int, default=1, help="log-likelihood batch size (generation is always 1)")
    p.add_argument("--bootstrap-iters", type=int, default=100000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int)
    p.add_argument(
        "--allow-code-eval",
        action="store_true",
        help="allow tasks that run model-written code (also needs HF_ALLOW_CODE_EVAL=1)",
    )
    p.add_argument("--out", required=True, help="JSON: aggregated results, per-sample outputs, numerical env")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("table", help="benchmarks.csv/.md, the AR-vs-Orthrus agreement table and a figure")
    p.add_argument("--inputs", nargs="*", default=[], help="JSON files written by `run`")
    p.add_argument("--out", required=True, help="CSV (a Markdown twin is written beside it)")
    p.add_argument("--agreement-out", help="default: <out stem>_agreement.csv")
    p.add_argument("--figure", help="figure path without extension (PNG and PDF); default: <out without .csv>")
    p.add_argument("--reference", help="AR model to compare against when a model has no AR run of its own")
    p.set_defaults(func=cmd_table)

    sub.add_parser("cli", help="lm-eval's own CLI with the `orthrus` model registered", add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "cli":
        return cmd_cli(argv[1:])
    args = build_parser().parse_args(argv)
    if args.cmd == "run" and args.limit is not None and args.limit >= 1:
        args.limit = int(args.limit)
    return args.func(args) or 0
