#!/usr/bin/env python3
"""Reads the TensorBoard event files of a moetune run with TensorBoard's own reader and prints what it found.

Run: python3 tests/reference/check_tensorboard.py RUN_DIR   (RUN_DIR/tensorboard holds the events; needs the
`tensorboard` package). Fails if TensorBoard cannot read them or they disagree with RUN_DIR/metrics.jsonl.
"""
import json
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main(run_dir: Path) -> int:
    accumulator = EventAccumulator(str(run_dir / "tensorboard"))
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    losses = {e.step: e.value for e in accumulator.Scalars("train/loss")}
    logged = {r["step"]: r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
              if "grad_norm" in r}
    mismatched = [s for s in logged if abs(losses.get(s, float("nan")) - logged[s]) > 1e-5 * abs(logged[s])]
    print(f"{len(tags)} scalar tags ({', '.join(sorted(tags)[:6])}, ...); train/loss at {len(losses)} steps; "
          f"{len(mismatched)} disagree with metrics.jsonl")
    return 1 if mismatched or not losses else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
