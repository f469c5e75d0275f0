"""The study's config as one typed model (pydantic): `StudyConfig`, a section per part of the config.

Each key's type, default, description and rules are stated once, on its section's field; a rule over
several keys is a validator on the section that owns them, a rule over the whole study one on the root
(orthrus/plan/config/study.py, rules.py, training.py). orthrus/plan/study_config.py reads a config into
it; `python -m orthrus.plan.config.generate` writes workflow/schemas/config.schema.yaml and
docs/CONFIG.md from it.
"""

from orthrus.plan.config.study import StudyConfig

__all__ = ["StudyConfig"]
