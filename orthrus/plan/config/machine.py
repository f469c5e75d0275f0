"""`machine`: the CPU kind and the thread count as an axis of the study (docs/MACHINES.md); the kinds
are orthrus/machine.py KINDS, each checked against this CPU when the config is."""

from __future__ import annotations

import platform
from typing import Annotated, Literal

from pydantic import Field, model_validator

from orthrus import machine
from orthrus.config import Int, Section, check, unique
from orthrus.contracts import DECODERS, EXTERNAL_DECODER
from orthrus.plan.config.decode import Attention, Precision

Kind = Literal[tuple(machine.KINDS)]
Decoder = Literal[tuple(d for d in DECODERS if d != EXTERNAL_DECODER)]


def emulable() -> bool:
    """Whether this machine can run any kind but native: an x86 CPU whose flags can be read. Elsewhere
    (an ARM machine, no /proc/cpuinfo) the axis has no second kind, and asking for one is no mistake
    of the config's: the extra kinds are skipped, each with its reason (orthrus/plan/machine_plan.py)."""
    return platform.machine().lower() in machine.X86 and machine.cpu_flags() is not None


class Cells(Section):
    """The cells each extra environment decodes: the study's own cells (decode.*, decode.grids, on as many
    prompts), narrowed to these; a value the study does not decode is no cell (the default's decoders are named
    for every overlay on it, most of which decode only some). The AR reference decodes wherever a cell of them
    does. Null: no narrowing."""

    decoders: unique(Decoder, min_length=1) | None = Field(None, description="Decoders (and controls).")
    precisions: unique(Precision, min_length=1) | None = Field(None, description="Precisions.")
    attentions: unique(Attention, min_length=1) | None = Field(None, description="Attention kernels.")


class Machine(Section):
    """The machine as an axis (docs/MACHINES.md, results/tables/verdicts_by_env.csv, match_by_env.csv,
    machine_probes.csv and the match_by_env figure): every CPU kind and thread count listed is an environment,
    `KIND-tTHREADS`; the first kind with the first thread count is the study's own (its decoding, perplexity and
    forensics jobs run under that kind), every other decodes, scores and explains `cells` again under its own kind
    (`orthrus --cpu-kind KIND`) and threads; each is analysed from those cells alone, and `orthrus compare-envs`
    sets each claim's verdict under every environment side by side for the claims `verdicts-machine-invariant`
    and `planted-machine-caught`. Only on decode.device cpu: on a GPU the study has one environment."""

    kinds: unique(Kind, min_length=1) = Field(
        ["native"],
        description="CPU kinds, the study's own first: native (the libraries' own choice), amx, avx512_bf16, "
        "avx512, avx2 (orthrus/machine.py maps each to ATen's, oneDNN's and oneMKL's switches). A kind this CPU "
        "cannot do is refused when the config is checked, naming the CPU flags it lacks (or skipped: "
        "`unavailable`); on a machine that runs no kind but native (not x86, or its flags unreadable) the other "
        "kinds are skipped with the reason printed.",
    )
    threads: unique(Annotated[Int, Field(ge=1, le=1024)], min_length=1) | None = Field(
        None,
        description="torch threads of each kind's environments, the study's own first (it must be `threads`); "
        "null is `threads` alone.",
    )
    cells: Cells = Field(Cells(), description=Cells.__doc__)
    common: bool = Field(
        True,
        description="Compare only the claims and subjects every environment states (`compare-envs --common`): "
        "each is analysed from `cells` alone, but the study's own forensics speaks of its other cells too.",
    )
    unavailable: Literal["refuse", "skip"] = Field(
        "refuse",
        description="A listed kind (not the first) this x86 CPU cannot do: refuse the config, or skip the kind "
        "with its reason printed (an overlay listing kinds for many CPUs). The first kind is always refused.",
    )

    @model_validator(mode="after")
    def _cpu(self):
        """Each kind against this CPU, before any job: the libraries silently ignore a cap above the CPU."""
        lines = []
        for i, kind in enumerate(self.kinds):
            why = machine.refusal(kind)
            if why and (i == 0 or (self.unavailable == "refuse" and emulable())):
                lines.append((f"kinds[{i}]", why))
        check(lines)
        return self


def machine_problems(cfg) -> list[str]:
    """The study's own environment is the first of machine.threads: its jobs run `threads` threads."""
    threads = cfg.machine.threads
    if threads and threads[0] != cfg.threads:
        return [
            f"machine.threads: its first ({threads[0]}) is the study's own environment, whose jobs run "
            f"`threads` ({cfg.threads}); list {cfg.threads} first"
        ]
    return []
