"""The trajectory record: what one decoding of one prompt produced, whoever ran it (transformers'
generate, this package's loop, an engine's file read by `orthrus ingest`), and the one writer that makes
it a row of a decoding result (contracts.DECODE_COLUMNS, docs/DESIGN.md "Decoding result").

Pure Python: the record holds what the tables read (the tokens and the forward counts of
orthrus.decode.tpf), the writer adds the cell and the prompt."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from orthrus.contracts import DECODE_COLUMNS


@dataclass
class Trajectory:
    tokens: list[int]
    n_prefill: int  # the verifying model's prefill forwards (1; 0 where nothing ran)
    n_verify: int  # its forwards after the prefill (a plain decoder's one per later token)
    n_diffusion: int = 0  # the proposer's forwards: Orthrus's diffusion passes, a draft model's
    accepted: list[int] = field(default_factory=list)  # draft tokens accepted per verify step
    seconds: float = math.nan
    finish_reason: str = "length"  # eos | length | error (a run's own words where an engine gives them)
    error: str | None = None

    @classmethod
    def failed(cls, error: str) -> Trajectory:
        """A prompt that ended in an error: no tokens, no forwards, `error` says which."""
        return cls(tokens=[], n_prefill=0, n_verify=0, finish_reason="error", error=error)

    @classmethod
    def from_loop(cls, tokens: list[int], stats: dict) -> Trajectory:
        """A run of this package's loop (orthrus.decode.loop.generate's `stats`)."""
        return cls(
            tokens=list(tokens),
            n_prefill=stats["n_prefill"],
            n_verify=stats["n_verify"],
            n_diffusion=stats["n_diffusion"],
            accepted=list(stats["accepted"]),
            seconds=stats["seconds"],
            finish_reason=stats["finish_reason"],
        )

    def columns(self) -> dict:
        return asdict(self)


def finish_reason(tokens: list[int], eos) -> str:
    """eos where the last token is a stop id, else length (the token budget ran out)."""
    return "eos" if tokens and tokens[-1] in eos else "length"


def decoding_row(cell: dict, prompt_id: str, domain: str, prompt_len: int, env: str, trajectory: Trajectory) -> dict:
    """One row of a decoding result: the cell (model, decoder, precision, attention), the prompt, the
    trajectory and the run's `env` (JSON)."""
    row = cell | {"prompt_id": prompt_id, "domain": domain, "prompt_len": prompt_len, "env": env}
    row |= trajectory.columns()
    missing = [c for c in DECODE_COLUMNS if c not in row]
    if missing:
        raise KeyError(f"a decoding row without {', '.join(missing)}")
    return {c: row[c] for c in DECODE_COLUMNS}
