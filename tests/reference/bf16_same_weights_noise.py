"""How far transformers' own bf16 run is from the fp32 run of the *same* bf16-rounded weights, gradient by gradient.

The GPU parity test (tests/gpu/test_model_parity.cpp) compares the GPU engine with the CPU engine on the fixture's
weights rounded to bf16: the same model, only the bf16 arithmetic differs. This script measures that distance with
transformers itself (eager attention, as the fixtures were made), so a bound the test widens can cite it.

Usage (repo root): python3 tests/reference/bf16_same_weights_noise.py FIXTURE BATCH [HF parameter names...]
BATCH is plain, padded or packed (tests/reference/make_parity.py's inputs); without names, the five worst.
"""
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).parent))
from make_parity import make_inputs  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def gradients(name: str, batch: str, round_weights: bool, dtype: torch.dtype) -> dict:
    model = AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=torch.float32, attn_implementation="eager")
    if round_weights:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    model = model.to(dtype)
    model(**make_inputs(model.config.vocab_size)[batch]).loss.backward()
    return {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}


def main() -> None:
    name, batch, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    same_weights_fp32 = gradients(name, batch, True, torch.float32)
    bf16 = gradients(name, batch, False, torch.bfloat16)
    errors = {n: ((bf16[n] - g).norm() / g.norm().clamp_min(1e-30)).item() for n, g in same_weights_fp32.items()}
    for n in names or sorted(errors, key=errors.get, reverse=True)[:5]:
        print(f"{name} {batch} {n}: transformers bf16 vs fp32 on the same bf16 weights {errors[n]:.3e}")


if __name__ == "__main__":
    main()
