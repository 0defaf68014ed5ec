"""How far transformers' own bf16 run is from the fp32 run of the *same* bf16-rounded weights, gradient by gradient.

The GPU parity test (tests/gpu/test_model_parity.cpp) compares the GPU engine with the CPU engine on the fixture's
weights rounded to bf16: the same model, only the bf16 arithmetic differs. This script measures that distance with
transformers itself (eager attention, as the fixtures were made), so a bound the test widens can cite it.

Usage (repo root): python3 tests/reference/bf16_same_weights_noise.py FIXTURE BATCH [HF parameter names...]
BATCH is plain, padded or packed (tests/reference/make_parity.py's inputs), or packed.0 / packed.1 for one of the
packed row's documents alone; without names, the five worst. Runs on the GPU where torch has one (the numbers match
the CPU's to the digits shown for granitemoehybrid_tiny, session 42).
"""
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).parent))
from make_parity import PACK_LENGTHS, make_inputs  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def gradients(name: str, batch: str, round_weights: bool, dtype: torch.dtype) -> dict:
    model = AutoModelForCausalLM.from_pretrained(FIXTURES / name, dtype=torch.float32, attn_implementation="eager")
    if round_weights:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device=device, dtype=dtype)
    model(**{k: v.to(device) for k, v in batch_inputs(model.config.vocab_size, batch).items()}).loss.backward()
    return {n: p.grad.float().cpu() for n, p in model.named_parameters() if p.grad is not None}


def batch_inputs(vocab: int, batch: str) -> dict:
    """make_parity's batch, or (packed.D) document D of its packed row alone, positions from 0."""
    inputs = make_inputs(vocab)
    if not batch.startswith("packed."):
        return inputs[batch]
    document = int(batch.split(".")[1])
    begin = sum(PACK_LENGTHS[:document])
    end = begin + PACK_LENGTHS[document]
    return {k: inputs["packed"][k][:, begin:end] for k in ("input_ids", "labels")}


def main() -> None:
    name, batch, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    same_weights_fp32 = gradients(name, batch, True, torch.float32)
    bf16 = gradients(name, batch, False, torch.bfloat16)
    errors = {n: ((bf16[n] - g).norm() / g.norm().clamp_min(1e-30)).item() for n, g in same_weights_fp32.items()}
    for n in names or sorted(errors, key=errors.get, reverse=True)[:5]:
        print(f"{name} {batch} {n}: transformers bf16 vs fp32 on the same bf16 weights {errors[n]:.3e}")


if __name__ == "__main__":
    main()
