"""The analysis stage's plan (workflow/rules/analysis.smk): what the perplexity job scores, which
decoding results each forensics job explains against which reference, and the verdicts' bound."""

from __future__ import annotations

from orthrus import contracts
from orthrus.decoders import DECODER
from orthrus.plan.decode_plan import decode_file
from orthrus.plan.paths import R


class AnalysisPlan:
    """`decode` answers the cells and the decoders on each model, `engines` the engines' files.

    Methods that take `wildcards` are Snakemake input functions (anything with a `model` attribute)."""

    def __init__(self, config, decode, engines):
        self.config, self.decode, self.engines = config, decode, engines
        self.teacher = decode.models.teacher

    def ppl_decoded(self) -> list[str]:
        """What the teacher scores: the reference in every cell of the decode grid, and the engines'
        plain runs that engine pairs declare as their reference."""
        ref = contracts.REFERENCE_DECODER
        cells = [(p, a) for p in self.decode.precisions for a in self.decode.attentions]
        return [decode_file(self.teacher, ref, p, a) for p, a in cells] + self.engines.plain_references()

    def forensics_files(self) -> list[str]:
        """One file per Orthrus model, one for the teacher's speculative decoders, one per engine's file."""
        models = self.decode.models.orthrus + ([self.teacher] if self.decode.teacher_decoders else [])
        return [f"{R}/forensics/{m}.parquet" for m in models] + [
            f"{R}/forensics/external/{n}.parquet" for n in self.engines.entries
        ]

    def _explained(self, model: str) -> list[str]:
        """The decoders whose divergences a forensics job on `model` explains: all but a model's own
        AR view (a second reference, not a decoder under audit)."""
        if model == self.teacher:
            return self.decode.teacher_decoders
        return [d for d in self.decode.model_decoders if DECODER[d].role != "view"]

    def forensics_decoded(self, wildcards) -> list[str]:
        """The decoding results a forensics job explains, in (precision, attention) order."""
        m = wildcards.model
        return [decode_file(m, d, p, a) for d in self._explained(m) for p, a in self.decode.cells(d, m)]

    def forensics_reference(self, wildcards) -> list[str]:
        """The reference file paired with each of forensics_decoded's."""
        m, ref = wildcards.model, contracts.REFERENCE_DECODER
        return [decode_file(self.teacher, ref, p, a) for d in self._explained(m) for p, a in self.decode.cells(d, m)]

    def rounding_ulps(self) -> str:
        """The verdicts' bound per precision, as the forensics and analyze commands take it."""
        return ",".join(f"{p}={v:g}" for p, v in self.config.analysis.rounding_ulps.model_dump().items())
