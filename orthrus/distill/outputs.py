"""What a run leaves behind: the live log beside the checkpoint, and the output directory."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from orthrus.contracts import TRAIN_EVAL_COLUMNS, TRAIN_LOG_COLUMNS


class LiveLog:
    """`OUT.ckpt/train_log.jsonl`: the log rows while the run goes on (rank 0 writes). On resume
    it is rewritten from the checkpoint's rows, so it never holds the steps redone after a kill."""

    def __init__(self, ckpt_dir: Path, rows: list, rank: int):
        self.dir, self.path, self.on = ckpt_dir, ckpt_dir / "train_log.jsonl", rank == 0
        if self.on and ckpt_dir.is_dir():
            self.path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def append(self, row: dict) -> None:
        if self.on:
            self.dir.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")


def write_outputs(out_dir: Path, model, state: dict, summary: dict) -> None:
    """The model (save_pretrained, with its tokenizer), the logs and the summary, atomically."""
    from orthrus.io import atomic_path, write_json
    from orthrus.models.checkpoint import record_model_digests

    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        model.save_pretrained(str(tmp), safe_serialization=True)
        _write_csv(tmp / "train_log.csv", state["log"], TRAIN_LOG_COLUMNS)
        (tmp / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in state["log"]))
        if state["eval"]:
            _write_csv(tmp / "eval_log.csv", state["eval"], TRAIN_EVAL_COLUMNS)
        write_json(tmp / "train_summary.json", summary)
        record_model_digests(tmp)  # the workflow's weight fingerprints read the record (common.smk)


def _write_csv(path, rows, fields) -> None:
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        wr.writeheader()
        wr.writerows(rows)
