"""Engines: prompts exported for an outside engine, its trajectories ingested, a stand-in engine."""
