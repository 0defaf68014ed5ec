"""How far transformers' own bf16 run is from its fp32 one at each step of a fixture's greedy sequence.

The GPU generation test (tests/gpu/test_generate_gpu.cpp) bounds each step's bf16 logits against the CPU engine's
fp32 ones. Where a tiny MoE fixture routes a token at a near-tie, bf16 flips the choice whatever the implementation
and that step's logits move far; this script measures it with transformers itself, so the test's bound can cite it.

Usage (repo root): python3 tests/reference/bf16_generation_noise.py NAME...   (fixtures under tests/fixtures)
Prints, per fixture, ||logits_bf16 - logits_fp32|| / ||logits_fp32|| at each step of the greedy sequence in
tests/fixtures/generate/greedy.json (the prompt, then one token a step, as the test feeds them).
"""
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def step_errors(name: str, prompt: list[int], tokens: list[int]) -> list[float]:
    logits = []
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=dtype).eval()
        with torch.no_grad():
            logits.append(model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:].float())
    fp32, bf16 = logits
    return [float((bf16[i] - fp32[i]).norm() / fp32[i].norm()) for i in range(len(tokens))]


def main() -> None:
    greedy = json.loads((FIXTURES / "generate" / "greedy.json").read_text())
    for name in sys.argv[1:]:
        errors = step_errors(name, greedy["prompt"], greedy["greedy"][name])
        worst = max(range(len(errors)), key=errors.__getitem__)
        print(f"{name}: worst {errors[worst]:.3e} at step {worst}; " + " ".join(f"{e:.2e}" for e in errors))


if __name__ == "__main__":
    main()
