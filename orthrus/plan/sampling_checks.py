"""The `sampling` config section's cross-key rules (orthrus/audit/sampling.py measures it).

Called by orthrus/plan/checks.py with the other cross-key rules, before any job."""

from __future__ import annotations


def problems(config: dict) -> list[str]:
    """The sampling section's cross-key rules, one line per problem naming the key."""
    s = config.get("sampling") or {}
    out = engine_problems(s, config)
    if not s.get("enabled", False):
        return out
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


def engine_problems(s: dict, config: dict) -> list[str]:
    """sampling.engines: at least one pair, each reference another entry that is only a reference, the
    two-sample test (whose settings it takes) on, a seed only where the workflow samples, an engine's
    settings only with `engine` and as that engine takes them (its `entry_problems`), and the engine's
    environment where an entry needs it."""
    from orthrus.engines.runner import ENGINES

    engines = s.get("engines") or {}
    if not engines:
        return []
    out = []
    if not (s.get("two_sample") or {}).get("enabled", True):
        out.append("sampling.engines: the engines' test takes sampling.two_sample's settings, and it is disabled")
    pairs = [n for n, e in engines.items() if e.get("reference")]
    if not pairs:
        out.append(
            "sampling.engines: no entry has a reference, so nothing is tested: give the speculative run "
            "`reference: NAME`, its plain run's entry"
        )
    for n, e in engines.items():
        ref = e.get("reference")
        if ref is not None and ref not in engines:
            out.append(f"sampling.engines.{n}.reference: {ref!r} is not an entry of sampling.engines {list(engines)}")
        elif ref is not None and (ref == n or engines[ref].get("reference")):
            out.append(
                f"sampling.engines.{n}.reference: {ref!r} must be a plain run, an entry with no reference of its own"
            )
        if e.get("seed") is not None and not (e.get("stand_in") or e.get("engine")):
            out.append(
                f"sampling.engines.{n}.seed: only a stand_in or an engine samples with it; a given file states its own"
            )
        if e.get("stand_in") and e.get("engine"):
            out.append(f"sampling.engines.{n}: stand_in and engine both write its file; give one")
        if not e.get("engine"):
            out += [
                f"sampling.engines.{n}.{k}: set without engine (only the workflow's engine run takes it)"
                for k in ("speculative", "k", "patches", "gguf", "draft")
                if k in e and e[k] not in (None, [], "none")
            ]
        elif e["engine"] in ENGINES:
            out += ENGINES[e["engine"]].entry_problems(f"sampling.engines.{n}", e, config)

    for engine in ENGINES.values():
        mine = [n for n, e in engines.items() if e.get("engine") == engine.name]
        if mine:
            problem = engine.problem(config, [f"sampling.engines.{n}" for n in mine], [engines[n] for n in mine])
            out += [problem] if problem else []
    return out
