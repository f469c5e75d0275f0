"""The decoding stage's plan (workflow/rules/decode.smk): which decoder runs on which model in which
(precision, attention) cells and on how many prompts, each cell's file and what its job reads; the
separate TPF run and the price-of-exactness measurement, which decode too."""

from __future__ import annotations

from orthrus import contracts
from orthrus.decoders import DECODER, DIFFUSION_DECODER, names
from orthrus.plan.config.decode import Grid
from orthrus.plan.fingerprints import weights_fingerprint
from orthrus.plan.paths import R

# an Orthrus model's AR view (the decoder table's view); its loop is DIFFUSION_DECODER
(VIEW,) = names(model="orthrus", role="view")


def decode_file(model: str, decoder: str, precision: str, attention: str) -> str:
    """A decoding result: a decoder's trajectories on a model in one cell."""
    return f"{R}/decode/{model}/{decoder}-{precision}-{attention}.parquet"


class DecodePlan:
    """The decoding cells of a config. `models` answers the teacher's and each model's paths and
    files, `engines` the engines' files and their cells (the reference covers them).

    Methods named like Snakemake input functions take its `wildcards` object (anything with the
    attributes `model`, `decoder`, `precision`, `attention`)."""

    def __init__(self, config, models, engines):
        self.config, self.models, self.engines = config, models, engines
        d = config.decode
        self.controls = d.controls
        self.precisions, self.attentions = d.precisions, d.attentions
        # transformers' speculative decoders (decode.decoders) run on the teacher, and so do the
        # teacher's controls (decode.controls); an Orthrus model's control runs on each Orthrus model
        self.teacher_decoders = d.decoders + [x for x in self.controls if x in contracts.TEACHER_CONTROLS]
        # every decoder that runs on the teacher, the reference first
        self.teacher_runs = [contracts.REFERENCE_DECODER] + self.teacher_decoders
        # decoders that run on an Orthrus model: its loop, (own_ar_view) its AR view, its controls
        self.model_decoders = (
            [DIFFUSION_DECODER]
            + ([VIEW] if d.own_ar_view else [])
            + [x for x in self.controls if x in contracts.MODEL_DECODERS]
        )
        # decode.grids: a narrower grid for a decoder on the teacher or for an Orthrus model's loops;
        # the reference keeps the full grid, on the prompts its cells there decode (reference_prompts)
        grids = d.grids
        self.grids = {
            k: g
            for k, g in grids.items()
            if k in self.teacher_decoders + self.controls and k not in self.models.orthrus
        }
        self.model_grids = {m: g for m, g in grids.items() if m in self.models.orthrus}

    # ------------------------------------------------------------------ cells

    def cells(self, decoder: str, model: str | None = None) -> list[tuple[str, str]]:
        """The (precision, attention) pairs `decoder` runs over (on `model`, for an Orthrus model's
        decoders), in the grid's order: a narrowed decoder's or control's grid, a narrowed model's
        grid for its Orthrus loop, AR view and lossy control, otherwise the full decode grid."""
        grid = self._grid_of(decoder, model)
        return [(p, a) for p in grid.precisions or self.precisions for a in grid.attentions or self.attentions]

    def _grid_of(self, decoder: str, model: str | None) -> Grid:
        if decoder in self.grids:
            return self.grids[decoder]
        if decoder in contracts.MODEL_DECODERS and model in self.model_grids:
            return self.model_grids[model]
        return Grid()

    def cell_prompts(self, decoder: str, model: str | None = None, precision: str | None = None) -> list:
        """`--prompts-per-domain` for `decoder`'s cells (on `model`, at `precision`), from the same
        decode.grids entry as `cells`: a number for every precision, or one per precision (a
        precision left out of the mapping, and no entry at all: every prompt)."""
        if decoder == contracts.REFERENCE_DECODER:
            n = self.reference_prompts(precision)
        else:
            n = self.per_domain(decoder, model, precision)
        return ["--prompts-per-domain", n] if n else []

    def per_domain(self, decoder: str, model: str | None, precision: str | None):
        n = self._grid_of(decoder, model).prompts_per_domain
        return n.get(precision) if isinstance(n, dict) else n

    def reference_prompts(self, precision: str):
        """The reference's prompts per domain at `precision`: the most that any cell it is compared
        with there decodes (the prompt set is ordered, so a cell's first n are the reference's first
        n); None (every prompt) when one of them decodes all, or an engine's file, whose prompts are
        its own, is at that precision."""
        if any(p == precision for p, _ in self.engines.cells.values()):
            return None
        counts = [
            self.per_domain(d, m, precision)
            for d, m in [(d, self.models.teacher) for d in self.teacher_decoders]
            + [(d, m) for m in self.models.orthrus for d in self.model_decoders]
            if any(p == precision for p, _ in self.cells(d, m if d in contracts.MODEL_DECODERS else None))
        ]
        return None if not counts or None in counts else max(counts)

    def files(self) -> list[str]:
        """Every decoding result of the study: the reference and transformers' speculative decoders on
        the teacher, each model's Orthrus loop and AR view, each engine's ingested file."""
        teacher = self.models.teacher
        files = [decode_file(teacher, d, p, a) for d in self.teacher_runs for p, a in self.cells(d)]
        files += [
            decode_file(m, d, p, a)
            for m in self.models.orthrus
            for d in self.model_decoders
            for p, a in self.cells(d, m)
        ]
        return files + [self.engines.file(n) for n in self.engines.entries]

    def tpf_files(self) -> list[str]:
        """The separate Table 2 run (tpf.enabled): every Orthrus model at the TPF settings."""
        tpf = self.config.tpf
        if not tpf.enabled:
            return []
        return [
            f"{R}/tpf/{m}/{DIFFUSION_DECODER}-{p}-{a}.parquet"
            for m in self.models.orthrus
            for p in tpf.precisions
            for a in tpf.attentions
        ]

    def frontier_files(self) -> list[str]:
        """The price-of-exactness measurement (frontier.enabled): its model, or the first Orthrus model."""
        frontier = self.config.frontier
        if not frontier.enabled or not self.models.orthrus:
            return []
        return [f"{R}/frontier/{frontier.model or self.models.orthrus[0]}.parquet"]

    # ------------------------------------------------------------------ a decoding job's inputs

    @staticmethod
    def on_teacher(decoder: str) -> bool:
        return DECODER[decoder].model == "teacher"

    def model_input(self, wildcards):
        """The files of the model the cell's decoder runs on."""
        return self.models.teacher_input() if self.on_teacher(wildcards.decoder) else self.models.input(wildcards)

    def model_arg(self, wildcards) -> str:
        return self.models.teacher_path() if self.on_teacher(wildcards.decoder) else self.models.path(wildcards.model)

    def draft_input(self, wildcards) -> list[str]:
        """The draft's files, for a decoder that needs one."""
        return self.models.draft_files() if DECODER[wildcards.decoder].needs_draft else []

    def draft_args(self, wildcards) -> list[str]:
        """`--draft-path` for a decoder that needs one (an argument list, each quoted by `:q`)."""
        return ["--draft-path", self.models.draft_path()] if DECODER[wildcards.decoder].needs_draft else []

    def reference_input(self, wildcards) -> list[str]:
        """The reference of the cell, for a decoder that drafts with its tokens (the oracle)."""
        if not DECODER[wildcards.decoder].takes_reference:
            return []
        teacher = self.models.teacher
        return [decode_file(teacher, contracts.REFERENCE_DECODER, wildcards.precision, wildcards.attention)]

    def weights(self, wildcards) -> str:
        """weights_fingerprint of a decoding job's model (and its draft, for a decoder that needs one)."""
        drafts = [self.models.draft_path()] if DECODER[wildcards.decoder].needs_draft else []
        return weights_fingerprint(self.model_arg(wildcards), *drafts)
