#!/usr/bin/env python3
"""The 48-layer LoRA benchmark's table (bench/lora48.sh): moetune's runs (their metrics.jsonl: median tokens/s over
the steps after the first two, the allocator's peak) against HF + PEFT (bench/peft_train.py's JSON).

    python3 bench/lora_table.py --hf HF.json --moetune LABEL=RUN_DIR|METRICS.jsonl ...
    --hf-reference "TOKENS_PER_S,PEAK_GB,LABEL" stands in for HF.json when HF + PEFT did not run in this call.
"""
import argparse
import json
import statistics
from pathlib import Path


def moetune_row(label: str, run: Path) -> dict:
    steps = []
    metrics = run if run.is_file() else run / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if "grad_norm" in record:
                steps.append(record)
    if not steps:
        return {"label": label, "status": "no steps"}
    measured = steps[2:] or steps
    return {"label": label, "status": "ok", "steps": len(steps),
            "tokens_per_second": statistics.median(s["tokens_per_second"] for s in measured),
            "step_seconds": statistics.median(s["step_seconds"] for s in measured),
            "peak_bytes": max(s.get("gpu_peak_bytes", 0) for s in steps),
            "first_loss": steps[0]["loss"], "last_loss": steps[-1]["loss"]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf", type=Path)
    parser.add_argument("--moetune", nargs="*", default=[])
    parser.add_argument("--hf-reference", help="TOKENS_PER_S,PEAK_GB,LABEL of an earlier HF + PEFT run")
    args = parser.parse_args()
    rows = []
    hf = None
    if args.hf_reference and not (args.hf and args.hf.exists()):
        tokens, peak, label = args.hf_reference.split(",", 2)
        hf = {"label": label, "status": "ok", "tokens_per_second": float(tokens), "step_seconds": 4096 / float(tokens),
              "peak_bytes": float(peak) * 1e9, "first_loss": float("nan"), "last_loss": float("nan"), "steps": 0}
        rows.append(hf)
    elif args.hf and args.hf.exists():
        h = json.loads(args.hf.read_text())
        hf = {"label": f"HF {h.get('transformers', '?')} + PEFT {h.get('peft', '?')} (grouped_mm, gradient checkpointing)",
              "status": h["status"], "tokens_per_second": h.get("tokens_per_second"), "step_seconds": h.get("step_seconds"),
              "peak_bytes": h.get("peak_allocated_bytes"), "first_loss": (h.get("losses") or [None])[0],
              "last_loss": (h.get("losses") or [None])[-1], "steps": len(h.get("losses") or [])}
        rows.append(hf)
    for item in args.moetune:
        label, run = item.split("=", 1)
        rows.append(moetune_row(label, Path(run)))
    print("| run | tokens/s | step s | peak GB (allocator) | × HF + PEFT | loss@1 | loss@last |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["status"] != "ok" or not r.get("tokens_per_second"):
            print(f"| {r['label']} | {r['status']} | | {(r.get('peak_bytes') or 0) / 1e9:.1f} | | | |")
            continue
        ratio = f"{r['tokens_per_second'] / hf['tokens_per_second']:.2f}" if hf and hf.get("tokens_per_second") else "n/a"
        print(f"| {r['label']} | {r['tokens_per_second']:,.0f} | {r['step_seconds']:.3f} | {r['peak_bytes'] / 1e9:.2f} | {ratio} "
              f"| {r['first_loss']:.4f} | {r['last_loss']:.4f} ({r['steps']} steps) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
