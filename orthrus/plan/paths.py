"""Where the workflow writes: every output of a study lives under `R` (the rules' and the plans' paths
are relative to the working directory the workflow runs in)."""

R = "results"
