"""Every setting that decides which tokens a decoding loop emits, in one frozen object.

Like transformers' `GenerationConfig` or vLLM's `SamplingParams`, a `DecodeOptions` holds the
whole decoding setting of one run: which decoder, at which precision and attention kernel, how
many tokens, how prompts become chat messages, which ids stop, and the loop's parity options
with the released reference loop. Its field defaults are the project's only defaults for these
settings (the config schema's are checked against them by a test). The workflow builds one per
decoding cell from the validated config (`from_config`) and passes it whole, as JSON, to every
stage that runs a loop; the decode stage records it in every row's `env` (`record`), and the
stages that replay or explain a run (forensics, perplexity, the TPF tables) read it back from
there (`from_row`), so none of them can use other options than the run it explains.

Pure Python (no torch): light stages read it too.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields

from orthrus.contracts import ATTENTIONS, DECODERS, EXTERNAL_DECODER, LOOP_DECODERS, PLAIN_LM_DECODERS, PRECISIONS
from orthrus.decoders import DECODER
from orthrus.errors import InputError

EOS_POLICIES = ("generation_config", "config")
LAST_BLOCKS = ("full", "shorten")
PREFILL_LOGITS = ("last", "all")
# the options below marked "loop" apply to this package's own loop (LOOP_DECODERS) only
LOOP_ONLY = ("block_size", "eos", "last_block", "prefill_logits", "verify_guard")
# How a prompt becomes chat messages: "empty" (an empty system message, then the user turn: the
# follow-up paper's trajectory study), "none" (the user turn alone: the authors' TPF script and
# training data) or "system:<text>".
MESSAGE_FORMATS = ("empty", "none")
# the fields that are also keys of the config's `decode` section (whose fields take their defaults from
# these: orthrus/plan/config/decode.py), and the controls' own sizes
CONFIG_KEYS = (
    "max_new_tokens",
    "verify_guard",
    "prompt_lookup_tokens",
    "message",
    "eos",
    "last_block",
    "prefill_logits",
    "deterministic",
)
NOISE_BATCH_SIZE = 8  # prompts per left-padded generate() call of the ar-batched control
ORACLE_BLOCK_SIZE = 8  # tokens per verify block of the oracle control
# the defaults of the decode-section keys the decoder table's own_options read
OWN_DEFAULTS = {"noise_batch_size": NOISE_BATCH_SIZE, "oracle_block_size": ORACLE_BLOCK_SIZE}


class OptionsError(InputError):
    """A decoding option out of its domain, named with the value given."""


def check_message(message) -> str:
    if message in MESSAGE_FORMATS or (isinstance(message, str) and message.startswith("system:")):
        return message
    raise OptionsError(f"message format must be 'empty', 'none' or 'system:<text>', got {message!r}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def env_record(env) -> dict:
    """A decoding row's `env` as a dict ({} where it is missing or not a JSON object)."""
    try:
        record = json.loads(env) if isinstance(env, str) else {}
    except json.JSONDecodeError:
        return {}
    return record if isinstance(record, dict) else {}


def declared_reference(env) -> str | None:
    """The external decoder a decoding row declares as its reference (`env.external.reference`)."""
    ext = env_record(env).get("external")
    return ext.get("reference") if isinstance(ext, dict) else None


@dataclass(frozen=True)
class DecodeOptions:
    """The decoding setting of one run (see the module docstring).

    decoder: ar-ref | ar | orthrus | assisted | prompt-lookup, or a control of the audit: oracle |
      ar-batched | orthrus-lossy (`orthrus.contracts.DECODERS`, `CONTROLS`), or external (an
      engine's trajectory file, decode.external).
    precision, attention: the dtype and attention kernel the model is loaded with.
    max_new_tokens: the token budget of a trajectory.
    block_size (loop): K of the Orthrus loop (and of the oracle's blocks); None takes the checkpoint's.
    message: none | empty | system:<text>, how a prompt becomes chat messages.
    eos (loop): `generation_config` stops on every id of the model's generation config (what
      transformers' generate does; Qwen3 lists two), `config` on `config.eos_token_id` only (the
      released Orthrus loop).
    last_block (loop): `full` runs every diffusion block at K tokens and uses only the proposals
      that fit the budget; `shorten` runs the last blocks at min(K, remaining + 1) tokens, as the
      released loop (bidirectional attention inside the block makes the two differ numerically).
    prefill_logits (loop): `last` or `all` prompt positions through the LM head (the released loop
      computes all, which can change the bits of the last row on some kernels).
    deterministic: torch's deterministic algorithms and cuDNN determinism on; false leaves torch's
      defaults, as the authors' scripts did.
    prompt_lookup_tokens (prompt-lookup only): transformers' prompt_lookup_num_tokens.
    temperature, top_k, top_p (our loop only): 0 is greedy; otherwise speculative sampling.
    batch_size (ar-batched only, >= 2): prompts per left-padded transformers generate() call.
    verify_guard (loop, greedy): TAU >= 0; a consensus step whose verify row (an accepted draft's or
      the correction's) has an AR top-1/top-2 margin below TAU ends there, and the next token is
      decided by a single-token AR forward, the reference's query shape. 0 is the plain loop.

    transformers' decoders (`ar-ref`, `assisted`, `prompt-lookup`) stop and prefill as
    transformers does, and an engine's file (`external`) as that engine did: their loop-only
    options must stay at their defaults, so that what a row records is what ran. For `external`
    the options record the study's settings the prompts were exported with (max_new_tokens,
    message) and the cell the file is compared in (precision, attention).
    """

    decoder: str = "orthrus"
    precision: str = "fp32"
    attention: str = "eager"
    max_new_tokens: int = 128
    block_size: int | None = None
    message: str = "empty"
    eos: str = "generation_config"
    last_block: str = "full"
    prefill_logits: str = "last"
    deterministic: bool = True
    prompt_lookup_tokens: int = 10
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    batch_size: int = 1
    verify_guard: float = 0.0

    def __post_init__(self):
        for name, allowed in (
            ("decoder", DECODERS),
            ("precision", PRECISIONS),
            ("attention", ATTENTIONS),
            ("eos", EOS_POLICIES),
            ("last_block", LAST_BLOCKS),
            ("prefill_logits", PREFILL_LOGITS),
        ):
            if getattr(self, name) not in allowed:
                raise OptionsError(
                    f"decoding option {name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}"
                )
        check_message(self.message)
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 0:
            raise OptionsError(f"decoding option max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        if self.block_size is not None and (not _is_int(self.block_size) or self.block_size < 2):
            raise OptionsError(
                f"decoding option block_size must be null (the model's) or an integer >= 2, got {self.block_size!r}"
            )
        if not isinstance(self.deterministic, bool):
            raise OptionsError(f"decoding option deterministic must be true or false, got {self.deterministic!r}")
        if not _is_int(self.prompt_lookup_tokens) or self.prompt_lookup_tokens < 1:
            raise OptionsError(
                f"decoding option prompt_lookup_tokens must be an integer >= 1, got {self.prompt_lookup_tokens!r}"
            )
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (0 <= t < math.inf):
            raise OptionsError(f"decoding option temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if self.top_k is not None and (not _is_int(self.top_k) or self.top_k < 0):
            raise OptionsError(f"decoding option top_k must be null or an integer >= 0 (0 = off), got {self.top_k!r}")
        p = self.top_p
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
            raise OptionsError(f"decoding option top_p must be null or a number in (0, 1], got {p!r}")
        own = dict(DECODER[self.decoder].own_options)
        if "prompt_lookup_tokens" not in own and self.prompt_lookup_tokens != DecodeOptions.prompt_lookup_tokens:
            raise OptionsError(
                f"decoding option prompt_lookup_tokens applies to the prompt-lookup decoder only, not {self.decoder}"
            )
        batched = "batch_size" in own
        if (
            not _is_int(self.batch_size)
            or self.batch_size < (2 if batched else 1)
            or (self.batch_size > 1 and not batched)
        ):
            raise OptionsError(
                f"decoding option batch_size is the ar-batched control's (an integer >= 2); every "
                f"other decoder decodes one prompt at a time: got {self.batch_size!r} for {self.decoder}"
            )
        g = self.verify_guard
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not (0 <= g < math.inf):
            raise OptionsError(f"decoding option verify_guard must be a finite number >= 0 (0 = off), got {g!r}")
        if g and self.temperature != 0:
            raise OptionsError("decoding option verify_guard guards the greedy loop: temperature must be 0")
        # orthrus-lossy samples too: its sampled bug is q at temperature 1 in the ratio (the sampling audit)
        if DECODER[self.decoder].greedy_only and self.temperature != 0:
            raise OptionsError(f"the {self.decoder} control is greedy: temperature must be 0, got {self.temperature!r}")
        if self.decoder in PLAIN_LM_DECODERS:
            changed = [
                f.name
                for f in fields(self)
                if f.name in LOOP_ONLY + ("temperature", "top_k", "top_p") and getattr(self, f.name) != f.default
            ]
            ran = (
                "an engine outside this package, greedy, as exported"
                if self.decoder == EXTERNAL_DECODER
                else "transformers' greedy generate"
            )
            if changed:
                raise OptionsError(
                    f"decoder {self.decoder} runs {ran}: {', '.join(changed)} "
                    "apply to this package's loop (ar, orthrus) only"
                )

    def replace(self, **changes) -> DecodeOptions:
        return dataclasses.replace(self, **changes)

    def record(self) -> dict:
        """Every field as a JSON-able dict (what a decoding row's `env` holds under "options")."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.record(), sort_keys=True)

    @classmethod
    def from_record(cls, record: dict) -> DecodeOptions:
        """From `record()`'s dict; a key that is not a field is an error naming it (fields left
        out take their defaults)."""
        if not isinstance(record, dict):
            raise OptionsError(f"decoding options must be a JSON object, got {type(record).__name__}")
        unknown = sorted(set(record) - {f.name for f in fields(cls)})
        if unknown:
            raise OptionsError(
                f"unknown decoding option(s) {', '.join(unknown)}; known: {', '.join(f.name for f in fields(cls))}"
            )
        return cls(**record)

    @classmethod
    def from_json(cls, text: str) -> DecodeOptions:
        try:
            return cls.from_record(json.loads(text))
        except json.JSONDecodeError as e:
            raise OptionsError(f"decoding options are not valid JSON ({e}): {text[:80]!r}") from None

    @classmethod
    def from_row(cls, env, decoder: str, precision: str, attention: str) -> DecodeOptions:
        """The options a decoding row ran with, from its `env` record and its configuration
        columns (which must agree with the record). Rows written before the options object
        existed kept their protocol settings beside the numerics: those are read, the rest take
        their defaults."""
        record = env_record(env)
        cell = {"decoder": decoder, "precision": precision, "attention": attention}
        if "options" not in record:
            legacy = ("message", "max_new_tokens") + (LOOP_ONLY if decoder in LOOP_DECODERS else ())
            return cls.from_record({k: record[k] for k in legacy if k in record} | cell)
        options = cls.from_record(record["options"])
        differ = {k: (v, getattr(options, k)) for k, v in cell.items() if getattr(options, k) != v}
        if differ:
            raise OptionsError(
                "a decoding row's columns disagree with the options it records: "
                + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in differ.items())
            )
        return options

    @classmethod
    def from_config(cls, section: dict, decoder: str, precision: str, attention: str, **changes) -> DecodeOptions:
        """The options of one decoding cell from a validated config section (`decode`, or
        `decode` updated by `tpf`): its keys that are fields, with `changes` on top. For
        transformers' decoders the loop-only keys are left out (they do not apply there), and
        `prompt_lookup_tokens` is kept only for prompt-lookup. The controls' settings have keys of
        their own: the ar-batched batch size is `noise_batch_size`, the oracle's block size
        `oracle_block_size`."""
        names = {f.name for f in fields(cls)}
        given = {k: v for k, v in section.items() if k in names}
        if decoder in PLAIN_LM_DECODERS:
            given = {k: v for k, v in given.items() if k not in LOOP_ONLY}
        own = dict(DECODER[decoder].own_options)
        if "prompt_lookup_tokens" not in own:
            given.pop("prompt_lookup_tokens", None)
        for field, key in own.items():  # e.g. the oracle's block size is decode.oracle_block_size
            given[field] = section.get(key, OWN_DEFAULTS.get(key, getattr(cls, field)))
        return cls(**(given | {"decoder": decoder, "precision": precision, "attention": attention} | changes))
