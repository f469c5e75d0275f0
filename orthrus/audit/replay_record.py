"""A replayed divergence as a bug report (`orthrus replay`, orthrus/audit/replay.py): the JSON
record of both sides, recorded and replayed, their forwards at the divergence, the verdict and the
numerical environment with the libraries' versions, and its one-paragraph summary."""

from __future__ import annotations

import platform
from pathlib import Path

from orthrus.models.precision import numerical_env

VERSIONED = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas", "pyarrow", "lm_eval", "orthrus")


def versions() -> dict:
    """The installed versions of the libraries a decoding depends on, and the platform."""
    from importlib import metadata

    out = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
    }
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name.replace("_", "-") if name == "lm_eval" else name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def token_at(tokens: list, t: int):
    return tokens[t] if t < len(tokens) else None


def record(
    results: Path,
    cell: dict,
    prompt_id: str,
    text: str,
    prompt_file: Path,
    dec,
    ref,
    t: int,
    replayed: dict,
    forwards: dict,
    verdict,
    layers,
) -> dict:
    """The JSON record of one replayed divergence (`dec` and `ref`: orthrus/audit/replay.py's sides)."""
    recorded = {"decoder": dec.recorded, "reference": ref.recorded}
    ref_tok, dec_tok = token_at(ref.recorded, t), token_at(dec.recorded, t)
    reproduced = {side: replayed[side] == recorded[side] for side in recorded}
    return {
        "results": str(results),
        **cell,
        "prompt_id": prompt_id,
        "domain": dec.row.domain,
        "prompt": text,
        "prompt_ids": dec.ids,
        "reference_prompt_ids": ref.ids if ref.ids != dec.ids else None,
        "files": {"decoder": str(dec.file), "reference": str(ref.file), "prompts": str(prompt_file)},
        "models": {"decoder": dec.path, "reference": ref.path},
        "options": {"decoder": dec.options.record(), "reference": ref.options.record()},
        "tokens": {"recorded": recorded, "replayed": replayed},
        "reproduced": reproduced | {"all": all(reproduced.values())},
        "divergence": {
            "position": t,
            "common_prefix": ref.recorded[:t],
            "reference_token": ref_tok,
            "decoder_token": dec_tok,
            "reference_text": None if ref_tok is None else ref.tokenizer.decode([ref_tok]),
            "decoder_text": None if dec_tok is None else dec.tokenizer.decode([dec_tok]),
        },
        "forwards": forwards,
        "margin": forwards.get("reference", {}).get("margin"),
        "verdict": verdict,
        "max_abs_hidden_diff": layers,
        "first_layer_diverging": None if layers is None else next((i for i, d in enumerate(layers) if d > 0), None),
        "numerical_env": {"decoder": numerical_env(dec.net), "reference": numerical_env(ref.net)},
        "recorded_env": {"decoder": dec.env, "reference": ref.env},
        "versions": versions(),
    }


def summary(rec: dict, out) -> str:
    d, f = rec["divergence"], rec["forwards"]
    what = f"{rec['model']}/{rec['decoder']}/{rec['precision']}/{rec['attention']} {rec['prompt_id']}"
    lines = [
        f"{what}: diverges from the reference at token {d['position']}: reference {d['reference_token']} "
        f"({d['reference_text']!r}), {rec['decoder']} {d['decoder_token']} ({d['decoder_text']!r})"
    ]
    if "reference" in f:
        lines.append(
            f"  reference step: margin {f['reference']['margin']:.4g} (fp32 {f['reference']['margin_fp32']:.4g}), "
            f"argmax {f['reference']['argmax']}"
        )
    if f.get("decoder", {}).get("kind") == "verify":
        lines.append(
            f"  {rec['decoder']} verify row: margin {f['decoder']['margin']:.4g}, argmax {f['decoder']['argmax']}, "
            f"block {f['decoder']['block']}; first differing layer {rec['first_layer_diverging']}"
        )
    elif f.get("decoder", {}).get("kind"):
        lines.append(
            f"  {rec['decoder']} own row ({f['decoder']['kind']}): margin {f['decoder']['margin']:.4g}, "
            f"argmax {f['decoder']['argmax']}"
        )
    if rec.get("verdict"):
        v = rec["verdict"]
        lines.append(f"  verdict: {v['verdict']} ({v['verdict_note']}; gap {v['gap_ulps']:g} ulp)")
    r = rec["reproduced"]
    lines.append(
        f"  replay reproduces the recorded trajectories: decoder {'yes' if r['decoder'] else 'NO'}, "
        f"reference {'yes' if r['reference'] else 'NO'} -> {out}"
    )
    return "\n".join(lines) + "\n"
