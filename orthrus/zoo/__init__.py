"""The bug zoo: public bugs in speculative decoders, each caught at the release that had it and passed
at the release (or the patch) that fixed it, judged by the study's own verdicts (docs/ZOO.md).

cases (the data: what a case is) -> envs (each release in its own environment) -> subjects (the tiny
world in the form a release reads) -> run (the release's driver, orthrus/zoo/drivers) -> judge (the
verdicts) -> record (zoo.csv, the figure, the findings rendered into the docs); cli ties them together.
"""
