#!/usr/bin/env python3
"""Checks that folders moetune saves load in transformers unchanged and give the same logits.

For each fixture: `moetune convert FIXTURE OUT --max-shard-size 20KB` (load through moetune's fused layout,
save back, re-sharded), then transformers loads both folders; the state dicts must be equal and the logits
bit-identical, and the logits must equal the fixture's recorded reference.

Run:  python3 tests/reference/check_saved_loads.py build/src/moetune/moetune tests/fixtures
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

FIXTURES = ["qwen3_moe_tiny", "qwen3_moe_tied_bf16", "qwen3_tiny", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny",
            "gpt_oss_tiny", "gpt_oss_mxfp4_tiny", "deepseek_v3_tiny", "deepseek_v3_qproj_tied"]
# Recorded from the dequantized weights upcast to fp32 (make_gpt_oss_fixtures.py), so compared so.
UPCAST_REFERENCE = {"gpt_oss_mxfp4_tiny"}


def main(binary: str, fixtures: Path) -> int:
    failures = 0
    for name in sys.argv[3:] or FIXTURES:
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([binary, "convert", str(fixtures / name), out, "--max-shard-size", "20KB"],
                           check=True, stdout=subprocess.DEVNULL)
            original = AutoModelForCausalLM.from_pretrained(fixtures / name).eval()
            saved = AutoModelForCausalLM.from_pretrained(out).eval()
            reference = load_file(fixtures / name / "reference.safetensors")
            with torch.no_grad():
                logits_original = original(input_ids=reference["input_ids"]).logits
                logits_saved = saved(input_ids=reference["input_ids"]).logits
            same_state = all(torch.equal(a, b) for a, b in zip(original.state_dict().values(),
                                                                   saved.state_dict().values()))
            same_logits = torch.equal(logits_original, logits_saved)
            if name in UPCAST_REFERENCE:
                with torch.no_grad():
                    logits_saved = saved.float()(input_ids=reference["input_ids"]).logits
            matches_reference = torch.equal(logits_saved.float(), reference["logits"])
            shards = len(list(Path(out).glob("*.safetensors")))
            ok = same_state and same_logits and matches_reference
            failures += not ok
            print(f"{name:22} {shards} shard(s)  state dict equal: {same_state}  logits identical: {same_logits}"
                  f"  = recorded reference: {matches_reference}  {'OK' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
