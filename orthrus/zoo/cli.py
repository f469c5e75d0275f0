"""`orthrus zoo ...`: the zoo's steps as commands, each writing its one output whole (the workflow's
rules in workflow/rules/zoo.smk call them; docs/ZOO.md shows the form of a case).

    orthrus zoo check CONFIG                                  # the zoo section, every wrong key named
    orthrus zoo subject KIND OUT.json                         # the subject in KIND's form (beside OUT)
    orthrus zoo env CONFIG CASE SIDE OUT.json                 # the release's environment (built, cached)
    orthrus zoo plan CONFIG CASE SUBJECT.json ENV.json OUT.json
    orthrus zoo run CONFIG CASE SIDE SUBJECT.json ENV.json PLAN.json OUT.json
    orthrus zoo record CONFIG ROW.json... --out DIR [--readme FILE.md ...]
    orthrus zoo render RECORD.csv FILE.md... [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orthrus.errors import InputError
from orthrus.io import atomic_path
from orthrus.zoo.cases import SIDES, SUBJECTS, Zoo, read_zoo


def _zoo(path: str) -> Zoo:
    zoo = read_zoo([path])
    if zoo is None:
        raise InputError(f"{path}: no `zoo` section")
    return zoo


def _case(zoo: Zoo, name: str):
    if name not in zoo.cases:
        raise InputError(f"unknown case {name!r} (have {', '.join(zoo.cases)})")
    return zoo.cases[name]


def _write_json(path: str, data: dict) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(data, indent=1, default=str) + "\n")


def _load(path: str) -> dict:
    return json.loads(Path(path).read_text())


def cmd_subject(a) -> None:
    from orthrus.zoo.subjects import build

    out = Path(a.out)
    _write_json(a.out, build(a.kind, out.parent / out.stem))


def cmd_env(a) -> None:
    from orthrus.zoo.envs import ensure, resolve

    zoo = _zoo(a.config)
    with open(Path(a.out).with_suffix(".log"), "w") as log:
        status = ensure(_case(zoo, a.case), a.side, resolve(zoo.env_dir), log)
    if not status["ok"]:
        print(f"zoo: {a.case} {a.side}: not installed: {status['reason']}", file=sys.stderr)
    _write_json(a.out, status)


def cmd_plan(a) -> None:
    from orthrus.zoo.run import plan

    zoo = _zoo(a.config)
    work = Path(a.out).parent
    _write_json(a.out, plan(_case(zoo, a.case), zoo, _load(a.subject), _load(a.env), work))


def cmd_run(a) -> None:
    from orthrus.zoo.run import side

    zoo = _zoo(a.config)
    case = _case(zoo, a.case)
    row = side(case, zoo, a.side, _load(a.subject), _load(a.env), _load(a.plan), Path(a.out).parent)
    print(
        f"zoo: {a.case} at {a.side} ({row['version']}): {row['verdict']}"
        + (f" ({row['reason']})" if row.get("reason") else "")
    )
    _write_json(a.out, row | {"case": a.case})


def cmd_record(a) -> None:
    from orthrus.zoo import record

    zoo = _zoo(a.config)
    rows = [_load(p) for p in a.rows]
    df = record.table([record.row_of(r["case"], zoo.cases[r["case"]], r) for r in rows])
    out = Path(a.out)
    with atomic_path(out / "zoo.csv") as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(out / "zoo.md") as tmp:
        Path(tmp).write_text(record.markdown(df))
    record.figure(df, out / "zoo.png")


def cmd_render(a) -> int:
    import pandas as pd

    from orthrus.zoo import record

    df = pd.read_csv(a.record)
    stale = [d for d in a.docs if not record.render(Path(d), df, check=a.check)]
    if a.check and stale:
        print(f"zoo findings out of date in: {', '.join(stale)} (orthrus zoo render {a.record} FILE)", file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="orthrus zoo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("check").add_argument("config")
    s = sub.add_parser("subject")
    s.add_argument("kind", choices=SUBJECTS)
    s.add_argument("out")
    for name, args in (("env", ["config", "case", "side", "out"]), ("plan", ["config", "case", "subject", "env", "out"]),
                       ("run", ["config", "case", "side", "subject", "env", "plan", "out"])):  # fmt: skip
        s = sub.add_parser(name)
        for arg in args:
            s.add_argument(arg, choices=SIDES if arg == "side" else None)
    s = sub.add_parser("record")
    s.add_argument("config")
    s.add_argument("rows", nargs="+")
    s.add_argument("--out", required=True)
    s = sub.add_parser("render")
    s.add_argument("record")
    s.add_argument("docs", nargs="+")
    s.add_argument("--check", action="store_true")
    return p


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    if a.command == "check":
        zoo = _zoo(a.config)
        print(f"{a.config}: {len(zoo.cases)} cases, {len(zoo.selected())} selected")
        return 0
    handler = {"subject": cmd_subject, "env": cmd_env, "plan": cmd_plan, "run": cmd_run, "record": cmd_record,
               "render": cmd_render}[a.command]  # fmt: skip
    return handler(a) or 0
