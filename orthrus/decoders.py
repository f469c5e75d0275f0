"""The decoder table: one row per decoder the study runs, saying what runs it, on which model, what it
is for and what it needs. The stages read these attributes instead of testing decoders' names
(tests/test_names.py keeps it so); adding a decoder is adding a row here and, where it runs code of
its own, its function (what transformers' generate takes and records for it:
orthrus/decode/transformers_decoders.py's GENERATE_ARGS and GENERATE_SETTINGS; the loop's step follows
from the row: drafts from the diffusion view, from the reference, or none).

Pure Python with no imports beyond the standard library: orthrus.contracts derives its vocabularies
from it, and the workflow reads it through them.
"""

from __future__ import annotations

from typing import NamedTuple

ROLES = ("reference", "view", "speculative", "control")
RUNNERS = ("generate", "loop", "engine")
MODELS = ("teacher", "orthrus", "engine")


class Decoder(NamedTuple):
    name: str
    # reference: the trajectory every other is compared with; view: a model's own AR trajectory;
    # speculative: a decoder under audit; control: separates numerics from bugs (decode.controls)
    role: str
    # generate: transformers' generate() on any causal LM it loads without remote code; loop: this
    # package's loop (orthrus.decode.loop.generate) on a Qwen3 or Orthrus checkpoint; engine: a file
    # an engine outside this package wrote (`orthrus ingest`)
    runner: str
    # teacher: runs on the teacher; orthrus: on each Orthrus model; engine: the engine's own
    model: str
    # the decoder's own option fields and the decode-section key each is read from (every other
    # decoder leaves them at their defaults)
    own_options: tuple[tuple[str, str], ...] = ()
    needs_draft: bool = False  # the teacher's draft model (teacher.draft)
    takes_reference: bool = False  # the reference trajectory's tokens, as its drafts
    batched: bool = False  # decodes prompts in left-padded batches (decode.noise_batch_size)
    diffusion: bool = False  # proposes with an Orthrus model's diffusion view (needs an Orthrus checkpoint)
    greedy_only: bool = False
    # lossless in exact arithmetic; the planted control is not, and the audit must say so
    lossless: bool = True
    # the loop's acceptance rule (orthrus.decode.loop.consensus): greedy, a draft token is accepted
    # among the AR view's top `accept_top`; sampled, the ratio's q is computed at `ratio_temperature`
    # (None: the sampler's own). Anything but 1 / None is a planted bug.
    accept_top: int = 1
    ratio_temperature: float | None = None


TABLE = (
    Decoder("ar-ref", "reference", "generate", "teacher"),
    Decoder("ar", "view", "loop", "orthrus"),
    Decoder("orthrus", "speculative", "loop", "orthrus", diffusion=True),
    Decoder("assisted", "speculative", "generate", "teacher", needs_draft=True),
    Decoder("prompt-lookup", "speculative", "generate", "teacher", (("prompt_lookup_tokens", "prompt_lookup_tokens"),)),
    # the consensus loop on the teacher whose drafts are the reference's own tokens: the verify shape's
    # numerics alone
    Decoder(
        "oracle",
        "control",
        "loop",
        "teacher",
        (("block_size", "oracle_block_size"),),
        takes_reference=True,
        greedy_only=True,
    ),
    # the reference through generate() in left-padded batches: the noise a serving engine shows without
    # speculation
    Decoder("ar-batched", "control", "generate", "teacher", (("batch_size", "noise_batch_size"),), batched=True),
    # a planted bug the audit must catch: Orthrus accepting a draft token among the AR view's top 2,
    # and, sampled, computing the acceptance ratio's q at temperature 1 whatever the draft's
    Decoder(
        "orthrus-lossy",
        "control",
        "loop",
        "orthrus",
        diffusion=True,
        lossless=False,
        accept_top=2,
        ratio_temperature=1.0,
    ),
    Decoder("external", "speculative", "engine", "engine"),
)
DECODER = {d.name: d for d in TABLE}


def names(**where) -> tuple[str, ...]:
    """The decoders, in the table's order, whose attributes equal `where`'s (e.g. role="control")."""
    bad = [k for k in where if k not in Decoder._fields]
    if bad:
        raise KeyError(f"no decoder attribute {', '.join(bad)}")
    return tuple(d.name for d in TABLE if all(getattr(d, k) == v for k, v in where.items()))


# the decoder under audit that drafts with an Orthrus model's diffusion view (Orthrus itself), and the
# planted bug beside it (the one decoder not lossless in exact arithmetic)
(DIFFUSION_DECODER,) = names(role="speculative", diffusion=True)
(PLANTED,) = names(lossless=False)
