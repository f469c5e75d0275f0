"""A zoo case as data: a public bug in a speculative decoder, the release that has it, the release
(or the patch) that fixes it, the subject and settings that trigger it, and the claim that must fail.

A case is an entry of `zoo.cases` in a config file (configs/zoo.yaml; the form is docs/ZOO.md's).
Adding one to an engine the zoo already drives (`ENGINES`) is an entry, not code: the arms' keyword
arguments are the engine's own, passed through to it as data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orthrus.errors import ConfigError

# engine -> the driver script its release runs (orthrus/zoo/drivers/, the contract in its __init__)
ENGINES = {
    "transformers": "transformers_generate.py",
    "llama_cpp_python": "llama_cpp_python.py",
    "vllm": "vllm_offline.py",
    "openai_server": "openai_server.py",
}
SUBJECTS = ("qwen3", "llama", "llama_gguf", "mtp")  # orthrus.zoo.subjects
SIDES = ("affected", "fixed")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Patch(Strict):
    """A fix the driver applies inside the release (a file of its own, importing nothing of orthrus)."""

    file: str  # relative to the repository root
    apply: list[str] = Field(min_length=1)  # the names of the fixes in it to apply


class Release(Strict):
    """One side of a case: a release of the package (`version`), installed from the registry into an
    environment of its own, or a prebuilt environment (`python`) with a fix applied by the driver
    (`patch`: a file the driver applies, the fix control of a bug with no fixed release yet)."""

    version: str | None = None
    install: list[str] | None = None  # pip requirements; default: the package at `version` (and torch)
    build_env: dict[str, str] = {}  # environment variables of the install (a source build's flags)
    python: str | None = None  # an environment built elsewhere (its interpreter), instead of installing
    build: str | None = None  # the command that builds `python` where it is missing (run in the repository)
    patch: Patch | None = None

    @model_validator(mode="after")
    def _one_source(self):
        if (self.version is None) == (self.python is None):
            raise ValueError("give exactly one of `version` (a release to install) and `python` (an environment)")
        return self


class Sampling(Strict):
    """The target's sampling settings, stated once: every engine's arms take them under these names,
    and the judge tests the samples against the target's probabilities after them."""

    temperature: float = Field(gt=0)
    top_k: int | None = Field(default=None, ge=1)
    top_p: float | None = Field(default=None, gt=0, le=1)


class Case(Strict):
    issue: str  # the upstream reference (an issue, a pull request, a commit)
    what: str  # what goes wrong, one sentence
    engine: Literal[tuple(ENGINES)]
    package: str
    affected: Release
    fixed: Release
    subject: Literal[SUBJECTS]
    draft: bool = False  # the arms need the subject's draft model
    arms: dict[Literal["reference", "speculative"], dict[str, Any]] = {"reference": {}, "speculative": {}}
    sampling: Sampling | None = None  # None: a greedy case
    # the tiny world's first eval prompt of each of the first N domains, or these prompt ids
    prompts: int | list[str] = Field(default=4)
    max_new_tokens: int = Field(default=16, ge=1)
    positions: int = Field(default=2, ge=1)  # sampled: positions the test reads (prefix strata)
    samples: int | None = Field(default=None, ge=10)  # sampled: per prompt; None = planned from the pilot
    pilot: int = Field(default=100, ge=10)  # sampled: per prompt, at the affected release
    max_samples: int = Field(default=2000, ge=10)  # sampled: the plan's ceiling
    power: float = Field(default=0.9, gt=0, lt=1)
    alpha: float = Field(default=0.01, gt=0, lt=1)
    timeout_s: int = Field(default=1200, ge=10)  # one driver run

    @property
    def mode(self) -> str:
        return "greedy" if self.sampling is None else "sampled"

    @model_validator(mode="after")
    def _prompts(self):
        from orthrus.world.domains import DOMAINS

        known = [f"{d}-0000" for d in DOMAINS]
        if isinstance(self.prompts, int) and not 1 <= self.prompts <= len(known):
            raise ValueError(f"prompts: a count from 1 to {len(known)}, or prompt ids ({', '.join(known)})")
        if isinstance(self.prompts, list) and (not self.prompts or set(self.prompts) - set(known)):
            raise ValueError(f"prompts: unknown ids {sorted(set(self.prompts) - set(known))} (have {', '.join(known)})")
        return self

    @model_validator(mode="after")
    def _arms(self):
        if set(self.arms) != {"reference", "speculative"}:
            raise ValueError("arms must name `reference` and `speculative`")
        return self


class Zoo(Strict):
    cases: dict[str, Case]
    env_dir: str = ".zoo-envs"  # the releases' environments, cached between runs (relative: to the repository)
    threads: int = Field(default=1, ge=1)
    seed: int = 0
    only: list[str] | None = None  # run these cases only (the others stay out of the record)

    @model_validator(mode="after")
    def _only_known(self):
        unknown = sorted(set(self.only or ()) - set(self.cases))
        if unknown:
            raise ValueError(f"only names unknown cases: {', '.join(unknown)}")
        return self

    def selected(self) -> dict[str, Case]:
        return {k: v for k, v in self.cases.items() if self.only is None or k in self.only}


def problems(e: ValidationError, where: str) -> list[str]:
    """Every wrong key with its path, one line each."""
    return [f"{where}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()]


def zoo_config(section: dict, where: str = "zoo") -> Zoo:
    try:
        return Zoo.model_validate(section)
    except ValidationError as e:
        raise ConfigError(problems(e, where)) from None


def read_zoo(paths) -> Zoo | None:
    """The zoo of the config files given (the last that has a `zoo` section), or None: not a zoo run."""
    section, where = None, None
    for p in paths or ():
        data = yaml.safe_load(Path(p).read_text()) or {}
        if isinstance(data, dict) and "zoo" in data:
            section, where = data["zoo"], f"{p}: zoo"
    return None if section is None else zoo_config(section, where)
