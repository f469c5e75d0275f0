"""Models: the Orthrus architecture, loading checkpoints and hub ids, numerical precision."""
