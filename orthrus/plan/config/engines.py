"""The entries of engines' files and runs: `decode.external` (a trajectory file an engine wrote),
`decode.engines` (a run the workflow makes itself), `sampling.engines` (an engine's sampled file), and
`engines` (the environment of the engines the workflow runs; docs/ENGINES.md, docs/EXTERNAL.md). The
keys of an `engine: openai` entry have no defaults here: the engine fills them in
(orthrus/engines/openai_engine.py), so an entry of another engine stays as it was written."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from orthrus.config import Int, Num, Section, unique
from orthrus.contracts import ATTENTIONS, PRECISIONS
from orthrus.engines.launchers import LAUNCHERS
from orthrus.engines.runner import ENGINE_CHOICES, STAND_IN_DECODERS
from orthrus.engines.vllm_patches import PATCHES

Engine = Literal[ENGINE_CHOICES]
StandIn = Literal[STAND_IN_DECODERS]
NonEmpty = Annotated[str, Field(min_length=1)]
Load = Annotated[Int, Field(ge=1, le=256)]


class External(Section):
    SPARSE = True  # an entry holds the keys given; its program applies the defaults
    path: str = Field(
        min_length=1,
        description='The engine\'s JSON Lines file (docs/DESIGN.md, "External trajectory file"); it must exist '
        "when the workflow is parsed, unless stand_in writes it.",
    )
    reference: str = Field(
        None,
        description="Another entry, the same engine's plain run (with no reference of its own), to compare this one "
        "with instead of the in-process ar-ref.",
    )
    precision: Literal[PRECISIONS] = Field(
        None, description="The file's precision and ar-ref cell; left out, its first record's env.dtype."
    )
    attention: Literal[ATTENTIONS] = Field(
        None,
        description="The kernel of the ar-ref it is compared with; left out, its first record's env.kernel, which "
        "must then be one of decode.attentions.",
    )
    stand_in: StandIn = Field(
        None,
        description="The workflow writes `path` itself with transformers' generate on the teacher, plain (`ar-ref`)"
        " or with prompt lookup, at `precision` and `attention` (both required then).",
    )


PATCH_LIST = Field(
    [],
    description="vLLM functions corrected for this run only (orthrus/engines/vllm_patches.py), named in every "
    "record's env.",
)


class Served(Section):
    """The keys of an `engine: openai` entry shared by decode.engines and sampling.engines."""

    SPARSE = True

    launch: Literal[tuple(LAUNCHERS)] = Field(
        None, description="openai: the server the workflow starts on the loopback. One of launch, command, url."
    )
    command: Annotated[list[NonEmpty], Field(min_length=1)] = Field(
        None,
        description="openai: any server's command line, with {host}, {port}, {model}, {slots} and {threads} filled "
        "in; it must answer GET /v1/models. One of launch, command, url.",
    )
    url: Annotated[str, Field(min_length=1)] = Field(
        None, description="openai: the base URL of a server the user already runs. One of launch, command, url."
    )
    api: Literal["llamacpp-completion", "openai-completions"] = Field(
        None,
        description="openai: the API a server is read through, llama.cpp's /completion (every token id) or "
        "/v1/completions; left out, llamacpp-completion for a llama.cpp server.",
    )
    model: Annotated[str, Field(min_length=1)] = Field(
        None, description="openai: the model requests name (left out, the server's first)."
    )
    slots: Load = Field(
        None,
        description="openai, launched: requests the server decodes at once; left out, the concurrency (llamacpp) "
        "or the largest one.",
    )
    server_args: list[str] = Field(None, description="openai, launched: arguments appended to the server's command.")
    extra_body: dict = Field(None, description="openai: fields merged into every request's body.")
    timeout_s: Annotated[Int, Field(ge=1)] = Field(
        None, description="openai: the bound on one run's requests, in seconds (left out, 3600)."
    )


class EngineRun(Served):
    engine: Engine = Field(description="The engine that runs the entry.")
    gguf: Annotated[str, Field(min_length=1)] = Field(
        None,
        description="llamacpp: the model file: f32, bf16 or f16 (the teacher converted), `source` (teacher.gguf's "
        "file) or a GGUF path; left out, the type of `precision`.",
    )
    speculative: Literal["none", "ngram", "draft_model", "eagle3"] = Field(
        "none", description="The engine's plain greedy decoding, or its speculative method (eagle3: draft required)."
    )
    k: Int = Field(4, ge=1, le=64, description="Draft tokens proposed per step.")
    precision: Literal[PRECISIONS] = Field(description="The dtype it runs at, and the ar-ref cell it is compared in.")
    attention: Literal[ATTENTIONS] = Field(
        None, description="The kernel of the ar-ref it is compared with; left out, the first of decode.attentions."
    )
    reference: str = Field(
        None,
        description="Another entry, the same engine's plain run at the same precision, to compare this one with "
        "instead of the in-process ar-ref.",
    )
    kv_cache: Literal["f32", "f16", "bf16"] = Field(None, description="llamacpp: the KV cache's type (left out, f16).")
    draft: Annotated[str, Field(min_length=1)] = Field(
        None,
        description="The draft model's directory (left out, teacher.draft's; llamacpp: a GGUF file or `self`); "
        "eagle3: the head's.",
    )
    batch_invariant: bool = Field(False, description="VLLM_BATCH_INVARIANT=1; refused on CPU, where vLLM crashes.")
    patches: unique(Literal[tuple(PATCHES)]) = PATCH_LIST
    concurrency: Annotated[list[Load], Field(min_length=1)] = Field(
        None,
        description="openai: the loads to audit (left out, [1]; must include 1): run NAME-cC is compared with "
        "NAME-c1, NAME-c1 with the reference.",
    )
    repeats: Annotated[Int, Field(ge=1, le=100)] = Field(
        None, description="openai: how many times each concurrency decodes the prompts (left out, 3)."
    )
    planted: bool = Field(
        None, description="openai: the planted control, a proxy that samples under load; the audit must flag it."
    )


class SampledEngine(Served):
    path: str = Field(
        min_length=1,
        description='The sampled JSON Lines file (docs/DESIGN.md, "Sampled engine file"); it must exist '
        "unless stand_in or engine writes it.",
    )
    reference: str = Field(
        None, description="Another entry, the engine's plain sampling, that this entry's samples are tested against."
    )
    stand_in: StandIn = Field(
        None, description="The workflow writes `path` with transformers' generate on the teacher, sampling."
    )
    engine: Engine = Field(None, description="The workflow writes `path` with this engine, sampling.")
    gguf: Annotated[str, Field(min_length=1)] = Field(None, description="llamacpp: as decode.engines' `gguf`.")
    draft: Annotated[str, Field(min_length=1)] = Field(None, description="draft_model: as decode.engines' `draft`.")
    speculative: Literal["none", "ngram", "draft_model"] = Field(
        "none", description="With engine: plain sampling, or speculative as in decode.engines."
    )
    k: Annotated[Int, Field(ge=1, le=64)] = Field(
        None, description="With engine: draft tokens proposed per step (left out, 4)."
    )
    patches: unique(Literal[tuple(PATCHES)]) = PATCH_LIST
    concurrency: Load = Field(None, description="openai: requests in flight at once while sampling (left out, 1).")
    seed: Annotated[Int, Field(ge=0)] = Field(
        None,
        description="With stand_in or engine: the first prompt's seed (then + 1 a prompt); left out, the entry's "
        "rank x 1000 + sampling.seed.",
    )


class Engines(Section):
    """The environment of the engines of decode.engines (docs/ENGINES.md)."""

    vllm_python: str | None = Field(
        None,
        description="vLLM's environment's Python (`bash envs/build-vllm.sh`); null: $ORTHRUS_VLLM_PYTHON.",
    )
    llamacpp_server: str | None = Field(
        None,
        description="llama.cpp's server (`bash envs/build-llamacpp.sh`); null: $ORTHRUS_LLAMACPP_SERVER.",
    )
    compile: bool = Field(False, description="Let vLLM compile the model at every start (off: enforce_eager).")
    kv_cache_gib: Num = Field(1, gt=0, description="The KV cache vLLM reserves, in GiB.")
