"""transformers' generate() in a release's own environment: the zoo's driver for `engine: transformers`.

    python transformers_generate.py SPEC.json OUT.jsonl

The contract is orthrus/zoo/drivers/__init__.py's. Each arm's keyword arguments go to generate() as
they are, any of them, so a case can trigger any decoder a release has; the one name resolved here is
`assistant_model: draft` (the spec's draft model). A sampled case's settings are added to both arms as
do_sample=True with its temperature, top_k and top_p. Standalone: the standard library, torch and
transformers only, since this runs inside the release under test.
"""

import json
import os
import platform
import sys


def load(path, extra):
    from transformers import AutoModelForCausalLM

    # `torch_dtype`: the spelling every release reads (5.x reads `dtype` too and still accepts it)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype="float32", **extra)
    return model.eval()


def generate_kwargs(spec, arm, draft):
    kwargs = dict(spec["arms"][arm])
    if kwargs.get("assistant_model") == "draft":
        if draft is None:
            raise SystemExit("zoo driver: the arm names assistant_model: draft but the spec has no draft model")
        kwargs["assistant_model"] = draft
    sampling = spec.get("sampling")
    if sampling:
        kwargs.update(do_sample=True, **{k: v for k, v in sampling.items() if v is not None})
    else:
        kwargs.setdefault("do_sample", False)
    return kwargs


def top2(logits_per_step):
    out = []
    for row in logits_per_step:
        v, i = row[0].float().topk(2)
        out.append([[int(i[0]), float(v[0])], [int(i[1]), float(v[1])]])
    return out


def run_arm(torch, model, spec, arm, draft, write):
    kwargs = generate_kwargs(spec, arm, draft)
    want_logits = arm == "reference" and spec.get("logits") and not spec.get("sampling")
    if want_logits:
        kwargs.update(return_dict_in_generate=True, output_scores=True)
    eos = model.generation_config.eos_token_id
    pad = model.generation_config.pad_token_id
    for i, prompt in enumerate(spec["prompts"]):
        ids = torch.tensor([prompt["ids"]], dtype=torch.long)
        for s in range(spec["samples"]):
            torch.manual_seed(spec["seed"] + i * spec["samples"] + s)
            with torch.no_grad():
                out = model.generate(
                    ids, attention_mask=torch.ones_like(ids), max_new_tokens=spec["max_new_tokens"],
                    eos_token_id=eos, pad_token_id=pad if pad is not None else eos, **kwargs,
                )  # fmt: skip
            seq = out.sequences if want_logits else out
            row = {"arm": arm, "prompt_id": prompt["id"], "sample": s, "tokens": seq[0, ids.shape[1] :].tolist()}
            if want_logits:  # greedy with no processor: the scores are the model's own logits
                row["top2"] = top2(out.scores)
            write(row)


def environment(torch, transformers, model, spec):
    cpu = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "unknown")()
    return {
        "engine": "transformers", "package": "transformers", "version": transformers.__version__,
        "torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
        "machine": platform.machine(), "threads": torch.get_num_threads(), "dtype": "float32",
        "attention": getattr(model.config, "_attn_implementation", "unknown"), "cpu_capability": cpu,
        "mkldnn": torch.backends.mkldnn.is_available(),
    }  # fmt: skip


def main(spec_path, out_path):
    import torch
    import transformers

    spec = json.load(open(spec_path))
    torch.set_num_threads(spec.get("threads", 1))
    model = load(spec["model"], spec.get("load", {}))
    draft = load(spec["draft"], spec.get("load", {})) if spec.get("draft") else None
    tmp = out_path + ".tmp"
    try:
        with open(tmp, "w") as f:

            def write(row):
                f.write(json.dumps(row) + "\n")

            write({"environment": environment(torch, transformers, model, spec)})
            for arm in ("reference", "speculative"):
                run_arm(torch, model, spec, arm, draft, write)
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: transformers_generate.py SPEC.json OUT.jsonl")
    try:
        main(sys.argv[1], sys.argv[2])
    except Exception as e:  # the traceback for the log, then one line for the record
        import traceback

        traceback.print_exc()
        sys.exit(f"zoo driver (transformers): {type(e).__name__}: {e}")
