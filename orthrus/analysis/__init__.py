"""`orthrus analyze`: every table of the study from the decoding results, the perplexity file
and the forensics rows (the command and its outputs: `orthrus.analysis.cli`).

- `load`         reading and checking the inputs; the error rows each table left out
- `match`        trajectory comparison with the AR reference; match, pairwise and decoders tables
- `tpf`          tokens per forward (Table 2)
- `ppl`          perplexity by match and the logistic regression on log PPL
- `uncertainty`  near-ties: margins at the divergences (forensics) and along the teacher's path
- `cli`          `analyze` (all tables), `write_tables`, `main`
"""

from orthrus.analysis.cli import analyze, main, write_tables
from orthrus.analysis.load import AnalysisError

__all__ = ["AnalysisError", "analyze", "main", "write_tables"]
