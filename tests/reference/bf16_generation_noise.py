"""How far transformers' own bf16 run is from its fp32 one at each step of a fixture's greedy sequence.

The GPU generation test (tests/gpu/test_generate_gpu.cpp) bounds each step's bf16 logits against the CPU engine's
fp32 ones. Where a tiny MoE fixture routes a token at a near-tie, bf16 flips the choice whatever the implementation
and that step's logits move far; this script measures it with transformers itself, so the test's bound can cite it.

Usage (repo root): python3 tests/reference/bf16_generation_noise.py [--rounded] NAME...   (fixtures under
tests/fixtures). Prints, per fixture, ||logits_bf16 - logits_fp32|| / ||logits_fp32|| at each step of the greedy
sequence in tests/fixtures/generate/greedy.json (the prompt, then one token a step, as the test feeds them). With
--rounded, the fp32 run of the fixture's weights rounded to bf16 instead of the bf16 run: the model the GPU holds,
computed exactly, which separates what rounding the weights changes from what bf16 arithmetic does; the steps whose
choice differs from the fp32 fixture's are named.
"""
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def step_logits(name: str, prompt: list[int], tokens: list[int], dtype: torch.dtype, rounded: bool) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=torch.float32).eval()
    if rounded:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    model = model.to(dtype)
    with torch.no_grad():
        return model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:].float()


def step_errors(name: str, prompt: list[int], tokens: list[int], rounded: bool) -> tuple[list[float], list[int]]:
    """Each step's relative error against the fp32 fixture, and the steps whose choice differs from its."""
    fp32 = step_logits(name, prompt, tokens, torch.float32, False)
    other = step_logits(name, prompt, tokens, torch.float32 if rounded else torch.bfloat16, rounded)
    errors = [float((other[i] - fp32[i]).norm() / fp32[i].norm()) for i in range(len(tokens))]
    flips = [i for i in range(len(tokens)) if int(other[i].argmax()) != int(fp32[i].argmax())]
    return errors, flips


def main() -> None:
    greedy = json.loads((FIXTURES / "generate" / "greedy.json").read_text())
    rounded = "--rounded" in sys.argv[1:]
    for name in (a for a in sys.argv[1:] if a != "--rounded"):
        errors, flips = step_errors(name, greedy["prompt"], greedy["greedy"][name], rounded)
        worst = max(range(len(errors)), key=errors.__getitem__)
        what = "fp32 on bf16-rounded weights" if rounded else "bf16"
        print(f"{name} ({what}): worst {errors[worst]:.3e} at step {worst}; choice differs at steps {flips}; " +
              " ".join(f"{e:.2e}" for e in errors))


if __name__ == "__main__":
    main()
