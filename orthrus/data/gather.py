"""`orthrus gather`: concatenate Parquet shards into one file, atomically."""

from __future__ import annotations

from orthrus.io import write_parquet


def main(argv=None) -> int:
    """`orthrus gather PARTS... --out F`: concatenate Parquet shards into one file."""
    import argparse

    import pandas as pd

    ap = argparse.ArgumentParser(prog="orthrus gather", description="Concatenate Parquet shards (atomically).")
    ap.add_argument("parts", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    write_parquet(args.out, pd.concat([pd.read_parquet(p) for p in args.parts], ignore_index=True))
    return 0
