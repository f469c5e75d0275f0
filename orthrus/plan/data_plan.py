"""The data stage's plan (workflow/rules/data.smk): the corpus's source as arguments, and the content
fingerprints of the inputs the workflow cannot see change (a local eval file, a local dataset)."""

from __future__ import annotations

import glob
import hashlib
import os

from orthrus.plan.fingerprints import file_fingerprint, fingerprint
from orthrus.plan.paths import R


class DataPlan:
    """The prompts' and corpus's inputs; `models` answers `pinned` (a hub id at its revision)."""

    def __init__(self, config, models):
        self.config = config
        self.models = models

    def eval_file_fingerprint(self) -> str:
        """The local prompts.eval_file's SHA-256 (the prompts job refuses one over its size cap); a
        URL is read again only when the config changes (pin it with prompts.eval_file_sha256)."""
        src = self.config.prompts.eval_file
        if not src or "://" in src or not os.path.isfile(os.path.expanduser(src)):
            return ""
        path = os.path.expanduser(src)
        if os.path.getsize(path) > 256 * 2**20:
            return file_fingerprint(path)
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    def dataset_fingerprint(self) -> str:
        """corpus.source hf: the files of a local dataset directory and the corpus.data_files (their
        patterns expanded as `datasets` does, relative to the working directory)."""
        c = self.config.corpus
        if c.source != "hf":
            return ""
        files = [glob.glob(os.path.expanduser(f), recursive=True) for f in c.data_files or []]
        files = [f for group in files for f in group if os.path.isfile(f)]
        d = os.path.expanduser(c.dataset or "")
        if os.path.isdir(d):
            files += [
                os.path.join(r, f)
                for r, dirs, names in os.walk(d)
                for f in names
                if not f.startswith(".") and not _hidden(os.path.relpath(r, d))
            ]
        return fingerprint(files)

    def corpus_source_args(self, wildcards, input) -> list:
        """The corpus's source as command-line arguments (a list, each quoted by `:q`): the
        distillation prompts the teacher answers, or a ready prompt-response dataset (corpus.source
        hf: hub id, directory or builder name)."""
        c = self.config.corpus
        if c.source == "generate":
            return ["--prompts", input.prompts]
        files = [str(f) for f in c.data_files or []]
        return (
            ["--dataset", self.models.pinned(c.dataset), "--dataset-split", c.split]
            + (["--data-files", *files] if files else [])
            + (["--expected-rows", c.expected_rows] if c.expected_rows else [])
            + ["--datasets-cache", f"{R}/cache/datasets"]
        )  # under results/, not the user's home cache


def _hidden(rel: str) -> bool:
    """A folder below a dataset directory whose path has a hidden part (`.cache/...`); the top is `.`."""
    return rel != "." and any(part.startswith(".") for part in rel.split(os.sep))
