"""The embedded default's fixed subject: the tiny teacher and its draft, built once by the
pipeline's own teacher rules and shipped with the package, as the paper studies one Qwen3-1.7B.

    orthrus subject check [--world]            # the shipped files (and --world: the generator)
    orthrus subject ship --teacher results/teacher --draft results/draft

A teacher trained in floating point differs from CPU to CPU, and so would every verdict built
on it; a shipped one is the same bits everywhere. `subject.json` records, per model, the
settings it was trained with, the SHA-256 of each file, and the fingerprint of the world text it
learned from (`orthrus.world.teacher.world_fingerprint`): `check` refuses a damaged file, and
`check --world` (a test runs it) says when the world generator no longer produces that text, in
which case the subject must be rebuilt (docs/USAGE.md, "The shipped subject").
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from orthrus.errors import InputError
from orthrus.models.checkpoint import _sha256

SUBJECT_DIR = Path(__file__).parent  # the shipped files lie beside this code
MANIFEST = "subject.json"
MODELS = ("teacher", "draft")
# what a model directory ships: the checkpoint, its tokenizer and the record of its training
SHIPPED = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "teacher_config.json",
    "teacher_eval.json",
    "train_log.csv",
)
REBUILD = (
    'snakemake --cores 2 --config \'teacher={"source": "tiny", "draft": {"source": "tiny"}}\' '
    "-- results/teacher results/draft && orthrus subject ship --teacher results/teacher --draft results/draft"
)


def model_dir(name: str, root: Path = SUBJECT_DIR) -> Path:
    return root / name


def _settings(src: Path) -> dict:
    try:
        return json.loads((src / "teacher_config.json").read_text())
    except (OSError, ValueError) as e:
        raise InputError(
            f"{src}: no readable teacher_config.json (not a tiny teacher built by `orthrus train-teacher`): {e}"
        ) from None


def ship(teacher: Path, draft: Path, root: Path = SUBJECT_DIR) -> dict:
    """Copy a built teacher and draft into `root` with their manifest (replacing what is there)."""
    from orthrus.io import atomic_path
    from orthrus.world.teacher import world_fingerprint

    manifest = {"rebuild": REBUILD, "models": {}}
    root.mkdir(parents=True, exist_ok=True)
    for name, src in (("teacher", Path(teacher)), ("draft", Path(draft))):
        cfg = _settings(src)
        files = [f for f in SHIPPED if (src / f).is_file()]
        missing = {"config.json", "model.safetensors", "tokenizer.json"} - set(files)
        if missing:
            raise InputError(f"{src}: missing {sorted(missing)}")
        with atomic_path(root / name) as tmp:
            tmp.mkdir()
            for f in files:
                shutil.copyfile(src / f, tmp / f)
        manifest["models"][name] = {
            "settings": cfg,
            # the draft learns the teacher's tokenizer (orthrus train-teacher --tokenizer)
            "world_fingerprint": world_fingerprint(cfg, own_tokenizer=name == "teacher"),
            "files": {f: _sha256(root / name / f) for f in files},
        }
    with atomic_path(root / MANIFEST) as tmp:
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def manifest(root: Path = SUBJECT_DIR) -> dict:
    try:
        return json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise InputError(
            f"{root / MANIFEST}: the shipped subject has no readable manifest ({e}); rebuild it: {REBUILD}"
        ) from None


def check(root: Path = SUBJECT_DIR, world: bool = False) -> list[str]:
    """Problems with the shipped subject, one line each (none: it is what was shipped). With
    `world`, also whether the world generator still produces the text each model learned from."""
    from orthrus.world.teacher import world_fingerprint

    problems = []
    for name, rec in manifest(root)["models"].items():
        for f, digest in rec["files"].items():
            path = root / name / f
            if not path.is_file():
                problems.append(f"{path}: missing from the shipped subject")
            elif _sha256(path) != digest:
                problems.append(f"{path}: SHA-256 differs from {MANIFEST}'s (a damaged or replaced file)")
        if world and world_fingerprint(rec["settings"], own_tokenizer=name == "teacher") != rec["world_fingerprint"]:
            problems.append(
                f"{name}: the world generator (orthrus/world) no longer produces the text the shipped "
                f"{name} was trained on; rebuild the subject: {REBUILD}"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="orthrus subject", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="verify the shipped files (and, with --world, the world generator)")
    c.add_argument("--world", action="store_true")
    c.add_argument("--root", type=Path, default=SUBJECT_DIR)
    s = sub.add_parser("ship", help="copy a built teacher and draft into the package, with their manifest")
    s.add_argument("--teacher", type=Path, required=True)
    s.add_argument("--draft", type=Path, required=True)
    s.add_argument("--root", type=Path, default=SUBJECT_DIR)
    args = ap.parse_args(argv)
    if args.cmd == "ship":
        m = ship(args.teacher, args.draft, args.root)
        for name, rec in m["models"].items():
            print(f"{name}: {len(rec['files'])} files, world {rec['world_fingerprint'][:12]}")
        return 0
    problems = check(args.root, world=args.world)
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(
            f"{args.root}: the shipped subject is intact"
            + (" and the world generator reproduces it" if args.world else "")
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
