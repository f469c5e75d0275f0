"""The models a study names and where each is: the teacher (built here, shipped with the package or
a hub id), its draft, and the Orthrus models (trained here or external checkpoints), as the paths a
job is given and as the files it reads (so that new weights rerun it)."""

from __future__ import annotations

import functools
import os

from orthrus.errors import ConfigError
from orthrus.plan.fingerprints import model_files
from orthrus.plan.paths import R
from orthrus.world import subject as shipped_subject


class ModelsPlan:
    """`teacher`, `draft` (its config section, or None), `trained` (the variants distilled here),
    `external` (external checkpoints: name -> path or hub id) and `orthrus` (both, trained first).

    Methods that take `wildcards` are Snakemake input functions (anything with a `model` attribute)."""

    def __init__(self, config):
        self.config = config
        self.teacher = config.teacher.name
        self.revisions = config.revisions
        self.draft = config.teacher.draft  # optional: only the assisted decoder needs one
        self.trained = list(config.models)
        self.external = config.external_models
        self.orthrus = self.trained + list(self.external)

    def pinned(self, path: str) -> str:
        """A hub id as `ID@REV` where `revisions` pins it (the loaders split it again), else as given."""
        return f"{path}@{self.revisions[path]}" if path in self.revisions else path

    def _source_path(self, name: str, source: str, path) -> str:
        """Where a teacher or draft is: the pipeline builds a tiny one under results/, the package
        ships the fixed subject (checked here, before any job), an hf one is a hub id or directory."""
        if source in ("tiny", "gguf"):  # built by a rule (train_teacher, convert_gguf)
            return f"{R}/{name}"
        if source == "shipped":
            _check_shipped_subject()
            return str(shipped_subject.model_dir(name))
        return self.pinned(path)

    def teacher_path(self) -> str:
        t = self.config.teacher
        return self._source_path("teacher", t.source, t.path)

    def teacher_input(self, wildcards=None):
        built = self.config.teacher.source in ("tiny", "gguf")
        return self.teacher_path() if built else model_files(self.teacher_path())

    def gguf_args(self, wildcards=None) -> list[str]:
        """`orthrus convert-gguf`'s source arguments for teacher.gguf (an argument list, each quoted by `:q`)."""
        g = self.config.teacher.gguf
        args = ["--gguf", os.path.expanduser(g.path)] if g.path else ["--package", g.package, "--file", g.file]
        return args + (["--sha256", g.sha256] if g.sha256 else [])

    def draft_path(self) -> str:
        return self._source_path("draft", self.draft.source, self.draft.path)

    def draft_files(self) -> list[str]:
        """What a job using the draft reads: the tiny draft's directory, or a local hf draft's files."""
        if not self.draft:
            return []
        return [self.draft_path()] if self.draft.source == "tiny" else model_files(self.draft_path())

    def path(self, name: str) -> str:
        """The teacher's path, a trained variant's directory under results/models, or an external
        checkpoint's path or hub id."""
        if name == self.teacher:
            return self.teacher_path()
        return self.pinned(self.external[name]) if name in self.external else f"{R}/models/{name}"

    def input(self, wildcards):
        """The files a job on the model `wildcards.model` reads: the teacher's, a trained variant's
        directory, or an external checkpoint's local files."""
        m = wildcards.model
        if m == self.teacher:
            return self.teacher_input()
        return model_files(self.external[m]) if m in self.external else self.path(m)

    def variant_settings(self, name: str) -> dict:
        """A trained variant's settings, its `seed` (default 0) plus the global `seed`: the global seed
        reaches every stage that draws anything (the tiny teacher, its tokenizer and data, the draft,
        the prompts, the distillation, the tiny benchmark documents), so `--config seed=N` is another
        realisation of the whole tiny world; decoding and the teacher's corpus are greedy."""
        s = self.config.models[name]
        return (s.model_dump() if s else {}) | {"seed": (s.seed if s else 0) + self.config.seed}


@functools.cache
def _check_shipped_subject():
    problems = shipped_subject.check()
    if problems:
        raise ConfigError([f"teacher.source: the shipped subject is damaged: {p}" for p in problems])
