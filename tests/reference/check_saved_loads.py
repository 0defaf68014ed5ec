#!/usr/bin/env python3
"""Checks that folders moetune saves load in transformers unchanged and give the same logits.

For each fixture: `moetune convert FIXTURE OUT --max-shard-size 20KB` (load through moetune's fused layout,
save back, re-sharded), then transformers loads both folders; the state dicts must be equal and the logits
bit-identical, and the logits must equal the fixture's recorded reference.

Run:  python3 tests/reference/check_saved_loads.py build/src/moetune/moetune tests/fixtures
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

FIXTURES = ["qwen3_moe_tiny", "qwen3_moe_tied_bf16", "qwen3_tiny", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny",
            "gpt_oss_tiny", "gpt_oss_mxfp4_tiny", "deepseek_v3_tiny", "deepseek_v3_qproj_tied", "nemotron_h_tiny",
            "qwen3_sliding_yarn", "mixtral_sliding_dynamic", "qwen2_tiny", "mistral_tiny", "phi3_tiny", "phi4_mini_tiny", "smollm3_tiny", "olmoe_tiny", "minimax_m2_tiny",
            "deepseek_v2_tiny", "deepseek_v2_grouped", "dots1_tiny", "olmo2_tiny", "olmo3_tiny",
            "exaone4_tiny", "solar_open_tiny", "flex_olmo_tiny", "exaone_moe_tiny", "gemma3_tiny", "gemma_tiny",
            "ernie4_5_moe_tiny", "granitemoehybrid_tiny", "granitemoeshared_tiny", "qwen3_next_tiny"]
# Recorded from the dequantized weights upcast to fp32 (make_gpt_oss_fixtures.py), so compared so.
UPCAST_REFERENCE = {"gpt_oss_mxfp4_tiny"}


def reference_of(folder: Path):
    """input_ids and logits recorded with the fixture, and whether they must match bit for bit:
    reference.safetensors (bit for bit), or the parity fixture's plain case (nemotron_h_tiny and qwen3_next_tiny have
    only that one; it
    was recorded on a single thread through the training path, 9e-8 from an eval forward, so within 1e-6)."""
    if (folder / "reference.safetensors").exists():
        return load_file(folder / "reference.safetensors"), True
    parity = load_file(folder / "parity.safetensors")
    return {"input_ids": parity["plain.input_ids"], "logits": parity["plain.logits"]}, False


def main(binary: str, fixtures: Path) -> int:
    failures = 0
    for name in sys.argv[3:] or FIXTURES:
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([binary, "convert", str(fixtures / name), out, "--max-shard-size", "20KB"],
                           check=True, stdout=subprocess.DEVNULL)
            reference, exact = reference_of(fixtures / name)
            # A parity fixture's logits were recorded with its attention implementation (eager: sdpa sums otherwise).
            options = {} if exact else {"attn_implementation": json.loads((fixtures / name / "parity.json").read_text())
                                        .get("attn_implementation", "eager")}
            original = AutoModelForCausalLM.from_pretrained(fixtures / name, **options).eval()
            saved = AutoModelForCausalLM.from_pretrained(out, **options).eval()
            with torch.no_grad():
                logits_original = original(input_ids=reference["input_ids"]).logits
                logits_saved = saved(input_ids=reference["input_ids"]).logits
            same_state = all(torch.equal(a, b) for a, b in zip(original.state_dict().values(),
                                                                   saved.state_dict().values()))
            same_logits = torch.equal(logits_original, logits_saved)
            if name in UPCAST_REFERENCE:
                with torch.no_grad():
                    logits_saved = saved.float()(input_ids=reference["input_ids"]).logits
            matches_reference = (torch.equal(logits_saved.float(), reference["logits"]) if exact else
                                 torch.allclose(logits_saved.float(), reference["logits"], rtol=0, atol=1e-6))
            shards = len(list(Path(out).glob("*.safetensors")))
            ok = same_state and same_logits and matches_reference
            failures += not ok
            print(f"{name:22} {shards} shard(s)  state dict equal: {same_state}  logits identical: {same_logits}"
                  f"  = recorded reference: {matches_reference}  {'OK' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
