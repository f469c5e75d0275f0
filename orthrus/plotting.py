"""matplotlib's pyplot on the file backend (Agg), imported where a figure is drawn: the figures of
`orthrus figures`, the frontier's and the sampling audit's."""

from __future__ import annotations


def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt
