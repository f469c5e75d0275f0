"""The machine axis's plan (`machine.*`, workflow/rules/machine.smk, docs/MACHINES.md): the numerical
environments the study runs in (a CPU kind and a thread count each, `KIND-tTHREADS`), the cells each
extra environment decodes again, its tables and claims, every environment's probe, and the comparison
that the study's claims read.

The first environment is the study's own: its decoding, perplexity and forensics jobs run under its
kind (`launcher`). Every other decodes machine.cells again under its kind and threads into
results/machine/ENV/decode/, and scores and explains them there (perplexity, forensics). Every
environment, the study's own of its files, is then analysed alike from those cells alone into
results/machine/ENV/tables/ and states its claims in results/machine/ENV/claims.csv; the comparison,
written into results/tables/, reads those and the probes, and the study's claims read it.
"""

from __future__ import annotations

import json
import shlex

from orthrus import contracts, machine
from orthrus.decoders import DECODER
from orthrus.plan.paths import R

REF = contracts.REFERENCE_DECODER


def env_name(kind: str, threads: int) -> str:
    """An environment's name, as orthrus/report/claims/machine.py env_name gives it (no pandas here)."""
    return f"{kind}-t{threads}"


class MachinePlan:
    """`decode` answers the study's cells, prompts and each decoder's model."""

    def __init__(self, config, decode):
        self.config, self.machine, self.decode = config, config.machine, decode
        self.kind = self.machine.kinds[0]
        self.threads = (self.machine.threads or [config.threads])[0]
        self.skipped: list[str] = []  # why an environment listed is not run, one line each (common.smk prints them)
        self.envs = self._environments()

    def _environments(self) -> dict[str, tuple[str, int]]:
        """{name: (kind, threads)}, the study's own first: every listed kind this CPU can do, at every
        thread count listed, on a CPU study that has a cell to decode again."""
        m, device = self.machine, self.config.decode.device
        threads = m.threads or [self.config.threads]
        own = {env_name(self.kind, self.threads): (self.kind, self.threads)}
        if len(m.kinds) == 1 and len(threads) == 1:
            return own
        if device != "cpu":
            self.skipped.append(f"machine: one environment, decode.device {device!r}: the kinds cap CPU products")
            return own
        if not any(d != REF for _, d, _, _ in self.cells()):
            self.skipped.append("machine: one environment: no decoder of machine.cells decodes in this study")
            return own
        kinds = [self.kind]
        # a kind that runs the code paths of one already run (avx2 beside native on an AVX2-only CPU)
        # would only repeat it: skipped, saying so, so that the axis costs nothing where it shows nothing
        ran = {machine.effective(self.kind): self.kind}
        for kind in m.kinds[1:]:
            why = machine.refusal(kind)
            same = None if why else ran.get(machine.effective(kind))
            if why or same:
                why = why or f"it runs the same code paths as {same} on this CPU"
                self.skipped.append(f"machine: {kind} skipped: {why}")
            else:
                kinds.append(kind)
                ran[machine.effective(kind)] = kind
        return own | {env_name(k, t): (k, t) for k in kinds for t in threads}

    @property
    def extra(self) -> list[str]:
        """The environments that decode again (all but the study's own)."""
        return list(self.envs)[1:]

    def launcher(self) -> str:
        """The command of the study's own decoding, perplexity and forensics jobs: `orthrus --cpu-kind KIND`,
        under the study's own kind (every row records it); `orthrus` on a GPU, whose products no kind caps."""
        return f"orthrus --cpu-kind {shlex.quote(self.kind)}" if self.config.decode.device == "cpu" else "orthrus"

    # ------------------------------------------------------------------ an extra environment's cells

    def cells(self) -> list[tuple[str, str, str, str]]:
        """(model, decoder, precision, attention) each extra environment decodes: the study's cells that
        machine.cells keeps, and the reference in each (precision, attention) of theirs."""
        c, d = self.machine.cells, self.decode

        def keep(decoder, p, a):
            return all(v is None or x in v for x, v in ((decoder, c.decoders), (p, c.precisions), (a, c.attentions)))

        runs = [(d.models.teacher, dec) for dec in d.teacher_decoders]
        runs += [(m, dec) for m in d.models.orthrus for dec in d.model_decoders]
        out = [
            (m, dec, p, a)
            for m, dec in runs
            for p, a in d.cells(dec, m if dec in contracts.MODEL_DECODERS else None)
            if keep(dec, p, a)
        ]
        used = {(p, a) for _, _, p, a in out}
        return [(d.models.teacher, REF, p, a) for p, a in d.cells(REF) if (p, a) in used] + out

    def decode_file(self, env: str, model: str, decoder: str, precision: str, attention: str) -> str:
        return f"{R}/machine/{env}/decode/{model}/{decoder}-{precision}-{attention}.parquet"

    def files(self, env: str) -> list[str]:
        return [self.decode_file(env, *cell) for cell in self.cells()]

    def cell_prompts(self, wildcards) -> list:
        """`--prompts-per-domain` of an extra environment's cell: the study's; the reference's, the most any
        cell of the environment at its precision decodes."""
        if wildcards.decoder != REF:
            return self.decode.cell_prompts(wildcards.decoder, wildcards.model, wildcards.precision)
        counts = [
            self.decode.per_domain(dec, m, p)
            for m, dec, p, _ in self.cells()
            if dec != REF and p == wildcards.precision
        ]
        n = None if not counts or None in counts else max(counts)
        return ["--prompts-per-domain", n] if n else []

    def reference_input(self, wildcards) -> list[str]:
        """The environment's own reference, for a decoder that drafts with its tokens (the oracle)."""
        if not DECODER[wildcards.decoder].takes_reference:
            return []
        return [
            self.decode_file(wildcards.env, self.decode.models.teacher, REF, wildcards.precision, wildcards.attention)
        ]

    def kind_of(self, wildcards) -> str:
        return self.envs[wildcards.env][0]

    def threads_of(self, wildcards) -> int:
        return self.envs[wildcards.env][1]

    # ------------------------------------------------------------------ an extra environment's analysis

    def ppl_decoded(self, wildcards) -> list[str]:
        """What an extra environment's perplexity job scores: its own reference."""
        return [self.decode_file(wildcards.env, *cell) for cell in self.cells() if cell[1] == REF]

    def forensics_models(self) -> list[str]:
        """The models with a cell whose divergences forensics explains (all but the reference and a view)."""
        cells = self.cells()
        return list(dict.fromkeys(m for m, d, _, _ in cells if d != REF and DECODER[d].role != "view"))

    def _explained(self, model: str) -> list[tuple[str, str, str, str]]:
        return [c for c in self.cells() if c[0] == model and c[1] != REF and DECODER[c[1]].role != "view"]

    def forensics_decoded(self, wildcards) -> list[str]:
        return [self.decode_file(wildcards.env, *c) for c in self._explained(wildcards.model)]

    def forensics_reference(self, wildcards) -> list[str]:
        """The environment's reference paired with each of forensics_decoded's."""
        teacher = self.decode.models.teacher
        return [self.decode_file(wildcards.env, teacher, REF, p, a) for _, _, p, a in self._explained(wildcards.model)]

    # ------------------------------------------------------------------ tables, claims, probes, comparison

    def analyze_input(self, wildcards) -> dict[str, list[str]]:
        """Every environment's tables from the same cells, analysed alike, so that a verdict can differ only
        by the numbers: an extra environment's decodings, perplexity and forensics; the study's own, of
        these cells (its claims.csv states many more, which the comparison cannot ask of the others)."""
        env = wildcards.env
        if env != list(self.envs)[0]:
            return {
                "decode": self.files(env),
                "ppl": [f"{R}/machine/{env}/ppl.parquet"],
                "forensics": [f"{R}/machine/{env}/forensics.parquet"],
            }
        decode = [f"{R}/decode/{m}/{d}-{p}-{a}.parquet" for m, d, p, a in self.cells()]
        return {"decode": decode, "ppl": [f"{R}/ppl/reference.parquet"], "forensics": [f"{R}/forensics.parquet"]}

    def tables_dir(self, env: str) -> str:
        return f"{R}/machine/{env}/tables"

    def claims_file(self, env: str) -> str:
        return f"{R}/machine/{env}/claims.csv"

    def probe_file(self, env: str) -> str:
        return f"{R}/machine/{env}/probe.json"

    def claims_args(self) -> list:
        """The settings the study's claims are stated with (analysis.*, sampling.two_sample.power)."""
        a = self.config.analysis
        return [
            "--equivalence-margin",
            a.equivalence_margin,
            "--alpha",
            a.alpha,
            "--power",
            json.dumps(a.power.model_dump(), sort_keys=True),
            "--sampled-power",
            self.config.sampling.two_sample.power,
        ]

    def comparison(self) -> list[str]:
        """The comparison's tables, which the study's claims read (none with one environment)."""
        return [f"{R}/tables/{t}" for t in contracts.MACHINE_TABLES] if self.extra else []

    def figure(self) -> list[str]:
        if not self.extra:
            return []
        return [f"{R}/figures/{contracts.MACHINE_FIGURE}.{e}" for e in contracts.FIGURE_FORMATS]

    def outputs(self) -> list[str]:
        return self.comparison() + self.figure()

    def compare_inputs(self) -> dict[str, list[str]]:
        envs = list(self.envs)
        return {
            "runs": [f"{self.tables_dir(e)}/match_overall.csv" for e in envs],
            "claims": [self.claims_file(e) for e in envs],
            "probes": [self.probe_file(e) for e in envs],
        }

    def compare_args(self) -> list[str]:
        """`orthrus compare-envs`'s environments, the study's own first (the planted control's baseline)."""
        out = []
        for env, (kind, threads) in self.envs.items():
            spec = f"{kind}:{threads}="
            out += ["--run", spec + self.tables_dir(env), "--claims", spec + self.claims_file(env)]
            out += ["--probe", spec + self.probe_file(env)]
        return out + (["--common"] if self.machine.common else [])
