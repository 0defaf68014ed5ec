"""How far transformers' own bf16 run is from its fp32 parity fixture, gradient by gradient.

The GPU parity test (tests/gpu/test_model_parity.cpp) bounds moetune's bf16 gradients against the fp32 fixtures.
For gradients that are sums of nearly cancelling terms (k_proj.bias: a key bias shifts all of a query's scores
alike, which softmax ignores) bf16 leaves a large relative error whatever the implementation; this script
measures that floor with transformers itself, the reference, so the test's bound can cite it.

Usage (on the GPU machine, repo root): python3 tests/reference/bf16_gradient_noise.py [--live] tests/fixtures/NAME...
Prints, per fixture and batch, the relative error ||g_bf16 - g_fp32|| / ||g_fp32|| of the worst gradients and of
every k_proj.bias, and the bf16 logits' error, as the C++ test computes them.
"""
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).parent))
import make_gpt_oss_fixtures  # noqa: E402
import make_parity  # noqa: E402


def relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual.float() - expected.float()).norm() / expected.float().norm().clamp_min(1e-30)).item()


def fp32_reference(folder: Path, attn: str, forward, device: str) -> dict:
    """The fp32 run's inputs and gradients, computed here (for a folder whose config differs from its fixture's)."""
    ref = load_file(folder / "parity.safetensors")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation=attn).to(device)
    for case in ("plain", "padded", "packed"):
        keys = [k for k in ("input_ids", "attention_mask", "position_ids", "labels") if f"{case}.{k}" in ref]
        model.zero_grad(set_to_none=True)
        out = forward(model, **{k: ref[f"{case}.{k}"].to(device) for k in keys})
        out.loss.backward()
        ref[f"{case}.loss"] = out.loss.detach().cpu()
        for name, p in model.named_parameters():
            ref[f"{case}.grad.{name}"] = p.grad.detach().cpu()
    return ref


def measure(folder: Path, live: bool) -> None:
    meta = json.loads((folder / "parity.json").read_text())
    gpt_oss = json.loads((folder / "config.json").read_text())["model_type"] == "gpt_oss"
    forward = make_gpt_oss_fixtures.forward if gpt_oss else make_parity.forward
    device = "cuda" if torch.cuda.is_available() else "cpu"
    attn = meta.get("attn_implementation", "eager")
    ref = fp32_reference(folder, attn, forward, device) if live else load_file(folder / "parity.safetensors")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation=attn)
    model = model.to(device).eval()
    for case in ("plain", "padded", "packed"):
        keys = [k for k in ("input_ids", "attention_mask", "position_ids", "labels") if f"{case}.{k}" in ref]
        inputs = {k: ref[f"{case}.{k}"].to(device) for k in keys}
        model.zero_grad(set_to_none=True)
        out = forward(model, **inputs)
        out.loss.backward()
        errors = {name: relative(p.grad, ref[f"{case}.grad.{name}"].to(device)) for name, p in model.named_parameters()}
        worst = sorted(errors.items(), key=lambda kv: -kv[1])[:3]
        kbias = {n: e for n, e in errors.items() if n.endswith("k_proj.bias")}
        layer0 = {n.split("self_attn.")[1]: e for n, e in errors.items() if "layers.0.self_attn" in n}
        print(f"{folder.name} {case}: loss {abs(out.loss.item() - ref[f'{case}.loss'].item()) / abs(ref[f'{case}.loss'].item()):.2e}"
              f" | worst " + ", ".join(f"{n} {e:.2e}" for n, e in worst)
              + (" | k_proj.bias " + ", ".join(f"{e:.2e}" for e in kbias.values()) if kbias else "")
              + " | layer 0 attention " + ", ".join(f"{n} {e:.2e}" for n, e in layer0.items()))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    live = "--live" in sys.argv  # fp32 gradients computed here rather than read from parity.safetensors
    for arg in (a for a in sys.argv[1:] if a != "--live"):
        measure(Path(arg), live)
