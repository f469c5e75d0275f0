"""The `sampling` config section's cross-key rules (orthrus/audit/sampling.py measures it).

Called by orthrus/plan/checks.py with the other cross-key rules, before any job."""

from __future__ import annotations


def problems(config: dict) -> list[str]:
    """The sampling section's cross-key rules, one line per problem naming the key."""
    s = config.get("sampling") or {}
    if not s.get("enabled", False):
        return []
    out = []
    models = list(config.get("models") or {}) + list(config.get("external_models") or {})
    if s.get("model") is not None and s["model"] not in models:
        out.append(f"sampling.model: {s['model']!r} is not an Orthrus model of models / external_models {models}")
    if any(t == 0 for t in s.get("temperatures") or []):
        out.append("sampling.temperatures: 0 is greedy; the sampling audit needs temperatures > 0")
    ts = s.get("two_sample") or {}
    if ts.get("enabled", False) and float(ts.get("temperature", 1.0)) == 1.0:
        out.append(
            "sampling.two_sample.temperature: the planted control's bug (q at temperature 1) is no bug at "
            "temperature 1; choose another"
        )
    grid = (config.get("decode") or {}).get("precisions") or []
    for p in s.get("precisions") or []:
        if grid and p not in grid:
            out.append(f"sampling.precisions: {p!r} is not in decode.precisions {grid}")
    return out
