"""The study a validated config asks for: its cells, every input and output path, the content
fingerprints that rerun what new weights or files change, and the arguments each job gets.

The workflow (workflow/rules/*.smk) only runs it: each rule reads a `Study` for its inputs and
params, so what the study is can be tested without Snakemake (tests/test_plan.py). Pure Python
(no torch): the workflow builds it while it is parsed.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os

from orthrus import contracts
from orthrus.decoders import DECODER
from orthrus.errors import ConfigError, InputError
from orthrus.plan.fingerprints import file_fingerprint, fingerprint, model_files, weights_fingerprint
from orthrus.plan.sampling_plan import SamplingPlan
from orthrus.world import subject as shipped_subject

R = "results"


class Study(SamplingPlan):
    """The study of one validated config (schema defaults filled in, cross-key checks passed).

    Methods named like Snakemake input functions take its `wildcards` object (anything with the
    attributes `model`, `decoder`, `precision`, `attention`)."""

    def __init__(self, config: dict):
        self.config = config
        c, d = config, config["decode"]
        self.teacher = c["teacher"]["name"]
        self.revisions = c["revisions"]
        self.draft = c["teacher"].get("draft")  # optional: only the assisted decoder needs one
        self.controls = d["controls"]
        # transformers' speculative decoders (decode.decoders) run on the teacher, and so do the
        # oracle and ar-batched controls; orthrus-lossy runs on each Orthrus model like its loop
        self.teacher_decoders = d["decoders"] + [x for x in self.controls if x in contracts.TEACHER_CONTROLS]
        # every decoder that runs on the teacher, the reference first
        self.teacher_runs = [contracts.REFERENCE_DECODER] + self.teacher_decoders
        self.precisions, self.attentions = d["precisions"], d["attentions"]
        self.trained = list(c["models"])
        self.external_models = c["external_models"]
        self.orthrus_models = self.trained + list(self.external_models)
        # decoders that run on an Orthrus model: its loop, (own_ar_view) its AR view, the lossy control
        self.model_decoders = (
            ["orthrus"]
            + (["ar"] if d["own_ar_view"] else [])
            + (["orthrus-lossy"] if "orthrus-lossy" in self.controls else [])
        )
        # decode.grids: a narrower grid for a decoder on the teacher or for an Orthrus model's loops;
        # the ar-ref reference keeps the full grid, on the prompts its cells there decode (reference_prompts)
        grids = d["grids"]
        self.grids = {
            k: g
            for k, g in grids.items()
            if k in self.teacher_decoders + self.controls and k not in self.orthrus_models
        }
        self.model_grids = {m: g for m, g in grids.items() if m in self.orthrus_models}
        self.tpf, self.frontier, self.bench, self.sampling = c["tpf"], c["frontier"], c["benchmarks"], c["sampling"]
        # engines' trajectory files (decode.external), and the runs the workflow makes itself
        # (decode.engines: workflow/rules/engines.smk), each the decoder `external` under its own name
        from orthrus.engines.runner import external_entries

        self.external = d["external"] | external_entries(config, R)
        self.external_cells = self._external_cells()

    # ------------------------------------------------------------------ models and their paths

    def pinned(self, path: str) -> str:
        """A hub id as `ID@REV` where `revisions` pins it (the loaders split it again), else as given."""
        return f"{path}@{self.revisions[path]}" if path in self.revisions else path

    def model_source_path(self, name: str, source: str, path) -> str:
        """Where a teacher or draft is: the pipeline builds a tiny one under results/, the package
        ships the fixed subject (checked here, before any job), an hf one is a hub id or directory."""
        if source in ("tiny", "gguf"):  # built by a rule (train_teacher, convert_gguf)
            return f"{R}/{name}"
        if source == "shipped":
            _check_shipped_subject()
            return str(shipped_subject.model_dir(name))
        return self.pinned(path)

    def teacher_path(self) -> str:
        t = self.config["teacher"]
        return self.model_source_path("teacher", t["source"], t["path"])

    def teacher_input(self, wildcards=None):
        built = self.config["teacher"]["source"] in ("tiny", "gguf")
        return self.teacher_path() if built else model_files(self.teacher_path())

    def gguf_args(self, wildcards=None) -> list[str]:
        """`orthrus convert-gguf`'s source arguments for teacher.gguf (an argument list, each quoted by `:q`)."""
        g = self.config["teacher"].get("gguf") or {}
        args = (
            ["--gguf", os.path.expanduser(g["path"])]
            if g.get("path")
            else ["--package", g["package"], "--file", g["file"]]
        )
        return args + (["--sha256", g["sha256"]] if g.get("sha256") else [])

    def draft_path(self) -> str:
        return self.model_source_path("draft", self.draft["source"], self.draft["path"])

    def draft_input(self, wildcards):
        """The tiny draft's directory, or a local hf draft's files, for the assisted decoder."""
        if not DECODER[wildcards.decoder].needs_draft:
            return []
        return [self.draft_path()] if self.draft["source"] == "tiny" else model_files(self.draft_path())

    def draft_args(self, wildcards):
        """`--draft-path` for the assisted decoder (an argument list, each quoted by `:q`)."""
        return ["--draft-path", self.draft_path()] if DECODER[wildcards.decoder].needs_draft else []

    def reference_input(self, wildcards):
        """The oracle's drafts: the ar-ref reference of its cell."""
        if not DECODER[wildcards.decoder].takes_reference:
            return []
        return [self.decode_file(self.teacher, "ar-ref", wildcards.precision, wildcards.attention)]

    @staticmethod
    def on_teacher(decoder: str) -> bool:
        return DECODER[decoder].model == "teacher"

    def model_path(self, name: str) -> str:
        """Trained variants live under results/models; external checkpoints are paths or hub ids."""
        return self.pinned(self.external_models[name]) if name in self.external_models else f"{R}/models/{name}"

    def orthrus_input(self, wildcards):
        """A trained variant's directory, or an external checkpoint's local files."""
        m = wildcards.model
        return model_files(self.external_models[m]) if m in self.external_models else self.model_path(m)

    def model_input(self, wildcards):
        return self.teacher_input() if self.on_teacher(wildcards.decoder) else self.orthrus_input(wildcards)

    def model_arg(self, wildcards) -> str:
        return self.teacher_path() if self.on_teacher(wildcards.decoder) else self.model_path(wildcards.model)

    def decode_weights(self, wildcards) -> str:
        """weights_fingerprint of a decoding job's model (and the assisted decoder's draft)."""
        drafts = [self.draft_path()] if DECODER[wildcards.decoder].needs_draft else []
        return weights_fingerprint(self.model_arg(wildcards), *drafts)

    def variant_settings(self, name: str) -> dict:
        """A trained variant's settings, its `seed` (default 0) plus the global `seed`: the global seed
        reaches every stage that draws anything (the tiny teacher, its tokenizer and data, the draft,
        the prompts, the distillation, the tiny benchmark documents), so `--config seed=N` is another
        realisation of the whole tiny world; decoding and the teacher's corpus are greedy."""
        s = dict(self.config["models"][name] or {})
        return s | {"seed": int(s.get("seed") or 0) + int(self.config["seed"])}

    # ------------------------------------------------------------------ inputs' fingerprints

    def eval_file_fingerprint(self) -> str:
        """The local prompts.eval_file's SHA-256 (the prompts job refuses one over its size cap); a
        URL is read again only when the config changes (pin it with prompts.eval_file_sha256)."""
        src = self.config["prompts"].get("eval_file")
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
        c = self.config["corpus"]
        if c["source"] != "hf":
            return ""
        files = [glob.glob(os.path.expanduser(f), recursive=True) for f in c["data_files"] or []]
        files = [f for group in files for f in group if os.path.isfile(f)]
        d = os.path.expanduser(c["dataset"] or "")
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
        c = self.config["corpus"]
        if c["source"] == "generate":
            return ["--prompts", input.prompts]
        files = [str(f) for f in c["data_files"] or []]
        return (
            ["--dataset", self.pinned(c["dataset"]), "--dataset-split", c["split"]]
            + (["--data-files", *files] if files else [])
            + (["--expected-rows", c["expected_rows"]] if c["expected_rows"] else [])
            + ["--datasets-cache", f"{R}/cache/datasets"]
        )  # under results/, not the user's home cache

    # ------------------------------------------------------------------ decoding cells

    def cells(self, decoder: str, model: str | None = None) -> list[tuple[str, str]]:
        """The (precision, attention) pairs `decoder` runs over (on `model`, for an Orthrus model's
        decoders), in the grid's order: a narrowed decoder's or control's grid, a narrowed model's
        grid for its Orthrus loop, AR view and lossy control, otherwise the full decode grid."""
        grid = self._grid_of(decoder, model)
        return [
            (p, a) for p in grid.get("precisions", self.precisions) for a in grid.get("attentions", self.attentions)
        ]

    def _grid_of(self, decoder: str, model: str | None) -> dict:
        if decoder in self.grids:
            return self.grids[decoder]
        if decoder in contracts.MODEL_DECODERS and model in self.model_grids:
            return self.model_grids[model]
        return {}

    def cell_prompts(self, decoder: str, model: str | None = None, precision: str | None = None) -> list:
        """`--prompts-per-domain` for `decoder`'s cells (on `model`, at `precision`), from the same
        decode.grids entry as `cells`: a number for every precision, or one per precision (a
        precision left out of the mapping, and no entry at all: every prompt)."""
        n = self.reference_prompts(precision) if decoder == "ar-ref" else self._per_domain(decoder, model, precision)
        return ["--prompts-per-domain", n] if n else []

    def _per_domain(self, decoder: str, model: str | None, precision: str | None):
        grid = self.grids.get(decoder) or (
            self.model_grids.get(model, {}) if decoder in contracts.MODEL_DECODERS else {}
        )
        n = grid.get("prompts_per_domain")
        return n.get(precision) if isinstance(n, dict) else n

    def reference_prompts(self, precision: str):
        """The ar-ref reference's prompts per domain at `precision`: the most that any cell it is
        compared with there decodes (the prompt set is ordered, so a cell's first n are the
        reference's first n); None (every prompt) when one of them decodes all, or an engine's
        file, whose prompts are its own, is at that precision."""
        if any(p == precision for p, _ in self.external_cells.values()):
            return None
        counts = [
            self._per_domain(d, m, precision)
            for d, m in [(d, self.teacher) for d in self.teacher_decoders]
            + [(d, m) for m in self.orthrus_models for d in self.model_decoders]
            if any(p == precision for p, _ in self.cells(d, m if d in contracts.MODEL_DECODERS else None))
        ]
        return None if not counts or None in counts else max(counts)

    @staticmethod
    def decode_file(model: str, decoder: str, precision: str, attention: str) -> str:
        return f"{R}/decode/{model}/{decoder}-{precision}-{attention}.parquet"

    def decode_files(self) -> list[str]:
        """Every decoding result of the study: the reference and transformers' speculative decoders on
        the teacher, each model's Orthrus loop and AR view, each engine's ingested file."""
        files = [self.decode_file(self.teacher, d, p, a) for d in self.teacher_runs for p, a in self.cells(d)]
        files += [
            self.decode_file(m, d, p, a)
            for m in self.orthrus_models
            for d in self.model_decoders
            for p, a in self.cells(d, m)
        ]
        return files + [self.external_file(n) for n in self.external]

    def tpf_files(self) -> list[str]:
        """The separate Table 2 run (tpf.enabled): every Orthrus model at the TPF settings."""
        if not self.tpf["enabled"]:
            return []
        return [
            f"{R}/tpf/{m}/orthrus-{p}-{a}.parquet"
            for m in self.orthrus_models
            for p in self.tpf["precisions"]
            for a in self.tpf["attentions"]
        ]

    def frontier_files(self) -> list[str]:
        """The price-of-exactness measurement (frontier.enabled): its model, or the first Orthrus model."""
        if not self.frontier["enabled"] or not self.orthrus_models:
            return []
        return [f"{R}/frontier/{self.frontier['model'] or self.orthrus_models[0]}.parquet"]

    # ------------------------------------------------------------------ forensics

    def forensics_files(self) -> list[str]:
        """One file per Orthrus model, one for the teacher's speculative decoders, one per engine's file."""
        models = self.orthrus_models + ([self.teacher] if self.teacher_decoders else [])
        return [f"{R}/forensics/{m}.parquet" for m in models] + [
            f"{R}/forensics/external/{n}.parquet" for n in self.external
        ]

    def _explained(self, model: str) -> list[str]:
        """The decoders whose divergences a forensics job on `model` explains."""
        return self.teacher_decoders if model == self.teacher else [d for d in self.model_decoders if d != "ar"]

    def forensics_decoded(self, wildcards) -> list[str]:
        """The decoding results a forensics job explains, in (precision, attention) order."""
        m = wildcards.model
        return [self.decode_file(m, d, p, a) for d in self._explained(m) for p, a in self.cells(d, m)]

    def forensics_reference(self, wildcards) -> list[str]:
        """The reference file paired with each of forensics_decoded's."""
        m = wildcards.model
        return [self.decode_file(self.teacher, "ar-ref", p, a) for d in self._explained(m) for p, a in self.cells(d, m)]

    def rounding_ulps(self) -> str:
        """The verdicts' bound per precision, as the forensics and analyze commands take it."""
        return ",".join(f"{p}={v:g}" for p, v in self.config["analysis"]["rounding_ulps"].items())

    # ------------------------------------------------------------------ engines (decode.external)

    def _external_cells(self) -> dict[str, tuple[str, str]]:
        """Each engine file's cell: the entry's precision and attention, else its file's env (read
        now, while the workflow is parsed), inside the decode grid."""
        from orthrus.engines.ingest import cell

        out = {}
        for name, entry in self.external.items():
            try:
                p, a = cell(name, entry)
            except InputError as e:
                raise ConfigError([str(e)]) from None
            for key, value, grid in (("precision", p, self.precisions), ("attention", a, self.attentions)):
                if value not in grid:
                    raise ConfigError(
                        [
                            f"decode.external.{name}.{key}: {value!r} (from {entry['path']}) not in the decode "
                            f"grid {grid} (the ar-ref reference runs only there): set it, or add it there"
                        ]
                    )
            out[name] = (p, a)
        return out

    def external_file(self, name: str) -> str:
        """The decoding result `orthrus ingest` writes for the decode.external entry `name`."""
        return self.decode_file(name, contracts.EXTERNAL_DECODER, *self.external_cells[name])

    def external_reference_file(self, name: str) -> str:
        """What the entry `name` is compared with: the engine's own plain run it declares, else the ar-ref of its cell."""
        ref = self.external[name].get("reference")
        return self.external_file(ref) if ref else self.decode_file(self.teacher, "ar-ref", *self.external_cells[name])

    def ppl_external_files(self) -> list[str]:
        """The engines' plain runs that engine pairs declare as their reference: the teacher scores their responses."""
        refs = sorted({e["reference"] for e in self.external.values() if e.get("reference")})
        return [self.external_file(r) for r in refs]

    # ------------------------------------------------------------------ benchmarks

    def code_tasks_left_out(self) -> list[str]:
        """Tasks that run model-written code, left out unless benchmarks.allow_code_eval opts in."""
        b = self.bench
        if b["allow_code_eval"] or b["tiny_tasks"]:
            return []
        return [t for t in b["tasks"] if contracts.runs_model_code(t)]

    def bench_tasks(self) -> str:
        b = self.bench
        if b["tiny_tasks"] is True:
            from orthrus.world.tiny_tasks import TASKS

            return ",".join(TASKS)
        if b["tiny_tasks"]:
            return ",".join(b["tiny_tasks"])
        return ",".join(t for t in b["tasks"] if t not in self.code_tasks_left_out())

    def bench_docs(self):
        """prepare-data's --n: one count, or TASK=N for each task (benchmarks.n_docs)."""
        n = self.bench["n_docs"]
        return ",".join(f"{t}={c}" for t, c in n.items()) if isinstance(n, dict) else n

    def bench_files(self) -> list[str]:
        """The teacher through its AR view (or, ar_baseline hf, lm-eval's own HF generate), every
        Orthrus model through its consensus loop."""
        baseline = "ar-ref" if self.bench["ar_baseline"] == "hf" else "ar"
        runs = [(self.teacher, baseline)] + [(m, "orthrus") for m in self.orthrus_models]
        return [
            f"{R}/benchmarks/{m}/{d}-{p}-{self.bench['attention']}.json"
            for m, d in runs
            for p in self.bench["precisions"]
        ]

    def bench_model_input(self, wildcards):
        return self.teacher_input() if wildcards.model == self.teacher else self.orthrus_input(wildcards)

    def bench_model_arg(self, wildcards) -> str:
        return self.teacher_path() if wildcards.model == self.teacher else self.model_path(wildcards.model)

    # ------------------------------------------------------------------ the study's outputs

    def study_outputs(self) -> list[str]:
        tables = list(contracts.TABLES) + list(contracts.CLAIMS_TABLES)
        return [f"{R}/tables/{t}" for t in tables] + [
            f"{R}/figures/{f}.{e}" for f in contracts.FIGURES for e in contracts.FIGURE_FORMATS
        ]

    def final_outputs(self, corpus_shards: list[str]) -> list[str]:
        """What `snakemake` builds: the study's tables wherever something is compared with the
        reference (an Orthrus model, a decoder on the teacher, an engine's file), else the corpus and
        the decodings; the benchmarks and the frontier where enabled."""
        studied = self.orthrus_models or self.teacher_decoders or self.external
        outputs = self.study_outputs() if studied else corpus_shards + self.decode_files()
        if self.bench["enabled"]:
            outputs += [f"{R}/tables/benchmarks.csv"]
        if self.frontier_files():
            outputs += [f"{R}/tables/exactness_cost.csv"]
        return outputs + self.sampling_outputs()


def _hidden(rel: str) -> bool:
    """A folder below a dataset directory whose path has a hidden part (`.cache/...`); the top is `.`."""
    return rel != "." and any(part.startswith(".") for part in rel.split(os.sep))


@functools.cache
def _check_shipped_subject():
    problems = shipped_subject.check()
    if problems:
        raise ConfigError([f"teacher.source: the shipped subject is damaged: {p}" for p in problems])
