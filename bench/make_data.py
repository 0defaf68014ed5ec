#!/usr/bin/env python3
"""Writes random token ids, one sequence a line, as {"input_ids": [...]} (moetune's input_ids format).

    python3 bench/make_data.py OUT.jsonl --tokens-per-seq 4096 --sequences 40 --vocab 151936 [--seed 1234]

Labels are the inputs (both moetune and hf_train.py shift them by one), so moetune and the HF runner train on
identical tokens when both read the lines in file order.
"""
import argparse
import json
import random
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tokens-per-seq", type=int, default=4096)
    parser.add_argument("--sequences", type=int, required=True)
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    if args.tokens_per_seq < 2 or args.sequences < 1 or args.vocab < 1:
        raise SystemExit("need --tokens-per-seq >= 2, --sequences >= 1, --vocab >= 1")
    rng = random.Random(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as out:
        for _ in range(args.sequences):
            ids = [rng.randrange(args.vocab) for _ in range(args.tokens_per_seq)]
            out.write(json.dumps({"input_ids": ids}, separators=(",", ":")) + "\n")
    print(f"wrote {args.sequences} x {args.tokens_per_seq} random tokens (vocab {args.vocab}) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
