"""The entries of engines' files and runs: `decode.external` (a trajectory file an engine wrote),
`decode.engines` (a run the workflow makes itself), `sampling.engines` (an engine's sampled file), and
`engines` (the environment of the engines the workflow runs). The keys of an `engine: openai` entry have
no defaults here: the engine fills them in (orthrus/engines/openai_engine.py), so an entry of another
engine stays as it was written."""

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
        description="The engine's trajectory file (JSON Lines, one record per prompt: docs/DESIGN.md, "
        '"External trajectory file"); it must exist when the workflow is parsed, unless stand_in writes it. A '
        "changed file reruns what reads it.",
    )
    reference: str = Field(
        None,
        description="Another entry of decode.external, the same engine's own plain-AR run, to compare this one "
        "with instead of the in-process ar-ref (an engine pair: its speculative run against its plain one); the "
        "teacher still scores the margins and the perplexity (of the reference's responses). That entry must have no"
        " reference of its own: it is compared with ar-ref.",
    )
    precision: Literal[PRECISIONS] = Field(
        None,
        description="The precision the file ran at, and the ar-ref cell it is compared in; left out, the first"
        " record's env.dtype says it (bfloat16, float16, float32, ...). Every record's env.dtype must agree. One of "
        "decode.precisions.",
    )
    attention: Literal[ATTENTIONS] = Field(
        None,
        description="The in-process attention kernel whose ar-ref the file is compared with, and the teacher's"
        " kernel for its forensics; left out, the first record's env.kernel, which must then be one of these (an "
        "engine's own kernel, FlashInfer or FlashAttention in vLLM, needs this key). One of decode.attentions.",
    )
    stand_in: StandIn = Field(
        None,
        description="The workflow writes `path` itself, as an engine would (the transformers stand-in engine, "
        "`orthrus engine-run --engine transformers`): transformers' generate on the teacher over the exported "
        "prompts' token ids, plain (`ar-ref`) or with prompt lookup (`prompt-lookup`, decode.prompt_lookup_tokens), "
        "at `precision` and `attention` (both required then). A stand-in engine: the smoke study runs the whole "
        "external path with it, and it is the recipe of docs/EXTERNAL.md with transformers as the engine.",
    )


PATCH_LIST = Field(
    [],
    description="vLLM functions corrected for this run only (orthrus/engines/vllm_patches.py; none by default), "
    "named in every record's env: cpu-expand-float corrects the CPU fallback of the rejection sampler's expand kernel"
    " (docs/findings/vllm-cpu-expand-batch-to-tokens.md).",
)


class Served(Section):
    """The keys of an `engine: openai` entry shared by decode.engines and sampling.engines."""

    SPARSE = True

    launch: Literal[tuple(LAUNCHERS)] = Field(
        None,
        description="openai: the server the workflow starts on the loopback: llamacpp "
        "(engines.llamacpp_server, serving `gguf`) or vllm (vLLM's OpenAI server in engines.vllm_python). One of "
        "launch, command, url.",
    )
    command: Annotated[list[NonEmpty], Field(min_length=1)] = Field(
        None,
        description="openai: any server's command line, started by the workflow; {host}, {port}, {model} (the"
        " teacher's directory), {slots} and {threads} in its arguments are filled in; it must answer GET /v1/models "
        "once it serves. One of launch, command, url.",
    )
    url: Annotated[str, Field(min_length=1)] = Field(
        None,
        description="openai: the base URL of a server the user already runs (http://HOST:PORT): nothing starts,"
        " and the URL alone names it. One of launch, command, url.",
    )
    api: Literal["llamacpp", "openai"] = Field(
        None,
        description="openai: the API the server is read through: llamacpp (llama.cpp's own /completion, which "
        "returns every token id) or openai (/v1/completions); left out, llamacpp for launch: llamacpp and for a "
        "server whose /v1/models says it is llama.cpp's (owned_by: llamacpp), else openai.",
    )
    model: Annotated[str, Field(min_length=1)] = Field(
        None, description="openai: the model name requests give (left out, the server's first in /v1/models)."
    )
    slots: Load = Field(
        None,
        description="openai, launched: requests the server decodes at once (llama.cpp's -np, vLLM's "
        "--max-num-seqs); left out, the concurrency for llamacpp (a start per concurrency) and the largest for vllm "
        "and command (one start).",
    )
    server_args: list[str] = Field(None, description="openai, launched: arguments appended to the server's command.")
    extra_body: dict = Field(
        None, description="openai: fields merged into every request's body (a server's own options)."
    )
    timeout_s: Annotated[Int, Field(ge=1)] = Field(
        None, description="openai: the bound on one run's requests, in seconds (left out, 3600)."
    )


class EngineRun(Served):
    engine: Engine = Field(
        description="The engine: vllm (its environment: engines.vllm_python) or llamacpp (llama.cpp's server, "
        "engines.llamacpp_server, serving the GGUF file of `gguf`)."
    )
    gguf: Annotated[str, Field(min_length=1)] = Field(
        None,
        description="llamacpp: the model file the server runs: f32, bf16 or f16 (the teacher converted by "
        "llama.cpp's own converter, results/gguf/TEACHER-TYPE.gguf), `source` (teacher.gguf's own file, as shipped: "
        "e.g. a registry's quantized one), or the path of a GGUF file; left out, the type of `precision`.",
    )
    speculative: Literal["none", "ngram", "draft_model", "eagle3"] = Field(
        "none",
        description="none: the engine's plain greedy decoding; ngram: its prompt lookup (n-grams 1..4 of the "
        "prompt and output); draft_model: a draft model proposes (draft, else teacher.draft); eagle3: an EAGLE-3 head"
        " proposes (draft required; a GPU build of vLLM).",
    )
    k: Int = Field(4, ge=1, le=64, description="Draft tokens proposed per step (num_speculative_tokens).")
    precision: Literal[PRECISIONS] = Field(
        description="The dtype vLLM runs at, and the ar-ref cell it is compared in; one of decode.precisions."
    )
    attention: Literal[ATTENTIONS] = Field(
        None,
        description="The in-process kernel whose ar-ref the run is compared with and that the teacher's "
        "forensics use (vLLM's own kernel, CPU_ATTN on CPU, is recorded in every record's env); left out, the first "
        "of decode.attentions.",
    )
    reference: str = Field(
        None,
        description="Another decode.engines entry, the same engine's plain run at the same precision, to "
        "compare this one with instead of the in-process ar-ref (what speculation changes on top of the engine's "
        "kernels).",
    )
    kv_cache: Literal["f32", "f16", "bf16"] = Field(
        None,
        description="llamacpp: the KV cache's type (-ctk/-ctv); left out, llama.cpp's default f16, whatever the"
        " weights' type.",
    )
    draft: Annotated[str, Field(min_length=1)] = Field(
        None,
        description="draft_model: the draft's directory (default: teacher.draft's; llamacpp: a GGUF file, "
        "`self` for the served model itself, default teacher.draft converted to the model's type); eagle3: the "
        "EAGLE-3 head's (required).",
    )
    batch_invariant: bool = Field(
        False, description="VLLM_BATCH_INVARIANT=1; refused on CPU, where vLLM 0.32's worker crashes with it."
    )
    patches: unique(Literal[tuple(PATCHES)]) = PATCH_LIST
    concurrency: Annotated[list[Load], Field(min_length=1)] = Field(
        None,
        description="openai: the loads to audit, requests in flight at once (left out, [1]); must include 1. "
        "Each value is a run NAME-cC, compared with NAME-c1 (C > 1) or the entry's reference (C = 1).",
    )
    repeats: Annotated[Int, Field(ge=1, le=100)] = Field(
        None,
        description="openai: how many times each concurrency decodes the prompt set (left out, 3): the "
        "distinct completions per prompt are counted across them.",
    )
    planted: bool = Field(
        None,
        description="openai: the planted control: a proxy samples a greedy request at temperature 1 while "
        "another request is in flight (orthrus/engines/openai_planted.py); the audit must flag it.",
    )


class SampledEngine(Served):
    path: str = Field(
        min_length=1,
        description='The sampled file (JSON Lines, one record per prompt: docs/DESIGN.md, "Sampled '
        'engine file"); it must exist when the study runs, unless stand_in or engine writes it.',
    )
    reference: str = Field(
        None,
        description="Another entry of sampling.engines, the same engine's plain sampling, that this entry's "
        "samples are tested against; an entry without one is only a reference.",
    )
    stand_in: StandIn = Field(
        None,
        description="The workflow writes `path` itself with the transformers stand-in engine (`orthrus "
        "engine-run --engine transformers` on the sampled export): transformers' generate on the teacher sampling "
        "plain (`ar-ref`) or with prompt lookup (`prompt-lookup`), in two_sample's precision and the first of "
        "decode.attentions.",
    )
    engine: Engine = Field(
        None,
        description="The workflow writes `path` itself with this engine (the project's vLLM recipe in "
        "engines.vllm_python, or llama.cpp's server, engines.llamacpp_server; one job per engine) sampling the "
        "sampled export in two_sample's precision.",
    )
    gguf: Annotated[str, Field(min_length=1)] = Field(
        None,
        description="llamacpp: the model file, as decode.engines' `gguf` (left out, two_sample's precision's type).",
    )
    draft: Annotated[str, Field(min_length=1)] = Field(
        None, description="draft_model: as decode.engines' `draft` (llamacpp: a GGUF type or file, or self)."
    )
    speculative: Literal["none", "ngram", "draft_model"] = Field(
        "none",
        description="With engine: plain sampling, or speculative as in decode.engines (draft_model: teacher.draft).",
    )
    k: Annotated[Int, Field(ge=1, le=64)] = Field(
        None, description="With engine: draft tokens proposed per step (left out, 4)."
    )
    patches: unique(Literal[tuple(PATCHES)]) = PATCH_LIST
    concurrency: Load = Field(None, description="openai: requests in flight at once while sampling (left out, 1).")
    seed: Annotated[Int, Field(ge=0)] = Field(
        None,
        description="With stand_in or engine: the first prompt's seed (each next prompt + 1); left out, the "
        "entry's rank x 1000 + sampling.seed, so no two entries the workflow samples share one.",
    )


class Engines(Section):
    """The environment of the engines of decode.engines (docs/ENGINES.md)."""

    vllm_python: str | None = Field(
        None,
        description="The Python of vLLM's environment (built by `bash envs/build-vllm.sh` from "
        "envs/vllm-cpu.txt: .venv-vllm/bin/python); null: the environment variable ORTHRUS_VLLM_PYTHON. A config with"
        " decode.engines is refused before any job where neither names a Python that finds vllm.",
    )
    llamacpp_server: str | None = Field(
        None,
        description="llama.cpp's server binary (built by `bash envs/build-llamacpp.sh`: "
        ".llamacpp/bin/llama-server; its converter beside it in .llamacpp/convert); null: the environment variable "
        "ORTHRUS_LLAMACPP_SERVER. A config with llamacpp entries is refused before any job where neither names an "
        "executable file.",
    )
    compile: bool = Field(
        False,
        description="Let vLLM compile the model (torch.compile/inductor) at every engine start; off: eager "
        "(enforce_eager), which on a small CPU saves minutes a start and gave the same fp32 trajectories.",
    )
    kv_cache_gib: Num = Field(
        1,
        gt=0,
        description="The KV cache vLLM reserves, in GiB (its CPU default, 92% of the node's memory, refuses "
        "to start on a shared machine).",
    )
