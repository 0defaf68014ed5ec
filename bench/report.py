#!/usr/bin/env python3
"""Reads the runs of one benchmark (runs.jsonl from bench/run.sh) and prints the comparison table.

    python3 bench/report.py OUT/runs.jsonl [--out DIR]

Each line of runs.jsonl names a run: label, runner (hf and nemo: hf_train.py's or nemo_train.py's JSON; moetune:
its metrics.jsonl), routing (balanced / skewed), result and model_config (the model's config.json), both relative to runs.jsonl's
folder, model_dir, seq, micro_batch, warmup, rc, wall_seconds, log, and pair (run.sh --pairs: which (HF grouped_mm,
moetune) pair a run belongs to; 1 where absent).
For moetune the step time is the median of step_seconds over the steps after warm-up, memory the largest
gpu_peak_bytes (its allocator's peak) and gpu_device_used_bytes over the steps. Model TFLOP/s use the same
FLOPs per token for both sides (model_flops.py). Ratios are against HF grouped_mm on the same routing, of the same
pair where the runs came in pairs (then the pairs' ratios and their median follow the table).
Writes results.json (everything, per step too) and results.md (the table) to --out (default: beside runs.jsonl).
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_flops import flops_per_token, throughput  # noqa: E402

BASELINE = "HF grouped_mm"


def read_hf(run: dict, path: Path) -> dict:
    if not path.exists():
        return {"status": f"no result (exit {run['rc']})"}
    result = json.loads(path.read_text())
    status = result.get("status", "?")
    if status != "ok":
        status = f"{status}: {result.get('error', '')}"[:120]
    return {"status": status, "tokens_per_second": result.get("tokens_per_second"),
            "step_seconds_median": result.get("step_seconds_median"), "step_seconds": result.get("step_seconds", []),
            "losses": result.get("losses", []), "peak_bytes": result.get("peak_allocated_bytes"),
            "device_bytes": result.get("device_used_bytes"), "tokens_per_step": result.get("tokens_per_step"),
            "measured_steps": max(0, len(result.get("step_seconds", [])) - result.get("warmup", 0))}


MOETUNE_PRECISION = "pure_bf16"  # bench/reference_job.yaml's optimizer.precision


def read_moetune(run: dict, path: Path) -> dict:
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                if "tokens_per_second" in record:  # training steps; validation lines carry only step and loss
                    records.append(record)
    records.sort(key=lambda r: r["step"])
    if not records:
        return {"status": f"no steps logged (exit {run['rc']})"}
    measured = [r for r in records if r["step"] > run["warmup"]]
    status = "ok" if run["rc"] == 0 else f"exit {run['rc']} after {len(records)} steps"
    out = {"status": status, "step_seconds": [r["step_seconds"] for r in records],
           "losses": [r["loss"] for r in records], "measured_steps": len(measured),
           "tokens_per_step": statistics.median(r["tokens"] for r in records)}

    def largest(key):
        values = [r[key] for r in records if r.get(key) is not None]
        return max(values) if values else None

    out["peak_bytes"], out["device_bytes"] = largest("gpu_peak_bytes"), largest("gpu_device_used_bytes")
    worst = [max(layer["load_max_over_mean"] for layer in r["moe"]) for r in records if r.get("moe")]
    if worst:
        out["expert_load_max_over_mean"] = max(worst)
    plan = path.with_name(path.name.replace(".metrics.jsonl", ".plan.json"))
    if plan.exists():  # `moetune inspect --tokens`: the predicted peak of the recipe's precision
        predicted = json.loads(plan.read_text()).get("gpu_step", {}).get("predicted_peak_bytes", {})
        out["planned_peak_bytes"] = predicted.get(MOETUNE_PRECISION)
    if measured:
        median = statistics.median(r["step_seconds"] for r in measured)
        out.update(step_seconds_median=median, tokens_per_second=out["tokens_per_step"] / median)
    return out


def gb(value):
    return "-" if value is None else f"{value / 1e9:.1f}"


def number(value, spec):
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out_dir = args.out or args.runs.parent
    runs = [json.loads(line) for line in args.runs.read_text().splitlines() if line.strip()]
    if not runs:
        raise SystemExit(f"{args.runs}: no runs")

    folder = args.runs.parent
    rows = []
    for run in runs:
        row = dict(run)
        result = folder / run["result"]
        try:
            row.update(read_hf(run, result) if run["runner"] in ("hf", "nemo") else read_moetune(run, result))
        except (ValueError, KeyError) as e:
            row["status"] = f"unreadable result: {type(e).__name__}: {e}"
        row.update(flops_per_token(json.loads((folder / run["model_config"]).read_text()), run["seq"]))
        if row.get("tokens_per_second"):
            row.update(throughput(row["tokens_per_second"], row["flops_per_token"]))
        rows.append(row)

    baselines = {(r["routing"], r.get("pair", 1)): r for r in rows
                 if r["runner"] == "hf" and r["label"] in (BASELINE, BASELINE + " skewed")  # not + compile, + Liger
                 and r.get("tokens_per_second")}
    for row in rows:
        base = baselines.get((row["routing"], row.get("pair", 1)))
        if base and row.get("tokens_per_second"):
            row["speedup_vs_hf_grouped_mm"] = row["tokens_per_second"] / base["tokens_per_second"]
        if base and row.get("peak_bytes") and base.get("peak_bytes"):
            row["peak_memory_vs_hf_grouped_mm"] = row["peak_bytes"] / base["peak_bytes"]

    first = rows[0]
    header = (f"Reference job: {first['model_dir']}, seq {first['seq']}, micro-batch {first['micro_batch']}, "
              f"{first['flops_per_token'] / 1e9:.3f} GFLOP/token, MFU vs 989 TFLOP/s (H200 dense bf16). "
              f"Speed: median step after warm-up; peak: framework allocator; device: used device memory.")
    columns = ["run", "routing", "tokens/s", "step s", "TFLOP/s", "MFU", "peak GB", "planned GB", "device GB",
               f"x {BASELINE}", "loss@1", "loss@last", "steps", "status"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        losses = r.get("losses") or []
        label = r["label"] + (f" (pair {r['pair']})" if r.get("pair", 1) > 1 else "")
        cells = [label, r["routing"], number(r.get("tokens_per_second"), ",.0f"),
                 number(r.get("step_seconds_median"), ".3f"), number(r.get("model_tflops"), ".0f"),
                 number(r.get("mfu"), ".1%"), gb(r.get("peak_bytes")), gb(r.get("planned_peak_bytes")),
                 gb(r.get("device_bytes")),
                 number(r.get("speedup_vs_hf_grouped_mm"), ".2f"), number(losses[0] if losses else None, ".4f"),
                 number(losses[-1] if losses else None, ".4f"), str(r.get("measured_steps", "-")), r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    # Each pair's moetune against its own HF grouped_mm, and their median: the ratio to quote (run.sh --pairs).
    paired = [r for r in rows if r["runner"] == "moetune" and r["routing"] == "balanced"
              and r.get("speedup_vs_hf_grouped_mm") and not r["label"].endswith("skewed")]
    if len(paired) > 1:
        ratios = [r["speedup_vs_hf_grouped_mm"] for r in paired]
        lines.append("")
        lines.append(f"Pairs (HF grouped_mm, then moetune), {len(ratios)}: x {BASELINE} "
                     + ", ".join(f"{x:.2f}" for x in ratios) + f"; median {statistics.median(ratios):.3f}")
    table = "\n".join(lines)
    print(header)
    print(table)

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps({"runs": rows}, indent=1) + "\n")
    (out_dir / "results.md").write_text(header + "\n\n" + table + "\n")
    print(f"wrote {out_dir / 'results.json'} and {out_dir / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
