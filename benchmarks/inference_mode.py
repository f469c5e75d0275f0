"""What recording an autograd graph would cost the Orthrus loop: `orthrus.generate` (inference mode) against
the same function run with autograd on (`generate.__wrapped__`), interleaved, one prompt, 128 tokens.

    python benchmarks/inference_mode.py [--model results/models/ce-k8] [--precision bf16] [--reps 5]

Prints the median seconds of each and their ratio. (A refactor once left the loop outside inference mode;
tests/test_decoding.py::test_the_loop_records_no_autograd_graph keeps it in.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from orthrus.chat import render_chat
from orthrus.decode.loop import generate
from orthrus.models.loading import load_model
from orthrus.options import DecodeOptions


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="results/models/ce-k8")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    o = DecodeOptions(decoder="orthrus", precision=args.precision, attention="sdpa", max_new_tokens=128)
    model, tok = load_model(args.model, o, "cpu")
    ids = torch.tensor(render_chat(tok, "what is 12 plus 7 and then 3 more", o.message))
    runs = {"inference_mode": generate, "autograd": generate.__wrapped__}
    times = {k: [] for k in runs}
    for _ in range(args.reps):
        for k, f in runs.items():
            t0 = time.perf_counter()
            f(model, ids, o)
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        ", ".join(f"{k} {v:.3f} s" for k, v in med.items())
        + f"; autograd / inference_mode = {med['autograd'] / med['inference_mode']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
