"""Writes tests/fixtures/int8_state/int8_state.safetensors: 8-bit blockwise AdamW as bitsandbytes defines it
(AdamW8bit: both moments in 8 bits, blocks of 256, the first moment in its signed dynamic map, the second in the
unsigned one, one float32 absmax per block), for moetune's CPU reference of optimizer.state: int8
(tests/train/test_adamw_int8.cpp).

Usage: python tests/reference/make_int8_state_fixtures.py tests/fixtures [--check]
Made with torch 2.15 and bitsandbytes 0.50.2 (the maps are bitsandbytes' own create_dynamic_map).

A re-implementation in numpy, float32 throughout, with each step as bitsandbytes' blockwise kernel takes it:
dequantize both moments (code * absmax), update moments and parameter in float32 (torch.optim.AdamW's order,
as train::AdamW computes it), then per block the new absmax and each value's nearest code: value * (1/absmax)
for a full block (value / absmax for the partial last one), clamped to [-1, 1], the count of float32 midpoints
between neighbouring codes it exceeds (bitsandbytes' CUDA kernel and torch backend round to the nearest code);
one deviation, moetune's: a positive second moment never gets code 0 (0.0) but at least code 1 (3.25e-7 of the
block's absmax), so that a tiny v beside a first moment that kept its code cannot blow the next update up
(ops/blockwise_quant_math.h says why).
With --check it also runs bitsandbytes' own AdamW8bit (its CPU backend) on the same input and prints how far
apart they are: the parameters agree to ~1e-7 after one step, but bitsandbytes 0.50.2's native CPU search
does not return the nearest code for values far below the block's absmax (it writes 1.6e-5 for 1.1e-6 of the
absmax), so its later steps drift from the nearest-code rule, and an all-zero block gets code 0 (not the code of
0.0) beside an absmax of 0, which dequantizes to 0 all the same.

Tensors:
  dynamic_map_signed [256], dynamic_map_unsigned [256]
  p0 [N], grad.K [N] for K < STEPS (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01);
  after the steps: p [N], state1 [N] (U8), absmax1 [blocks], state2 [N] (U8), absmax2 [blocks].
  N = 256 * 20 + 37: a partial last block; block 3 gets zero gradients.
"""
import sys
from pathlib import Path

import numpy as np
import bitsandbytes
import bitsandbytes.functional as F
import torch
from safetensors.numpy import save_file

STEPS = 5
BLOCK = 256
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 0.01
f32 = np.float32


def midpoints(code):
    return ((code[:-1] + code[1:]) / f32(2)).astype(f32)


def quantize(values, mids, nonzero=False):
    codes = np.zeros(len(values), np.uint8)
    absmax = np.zeros((len(values) + BLOCK - 1) // BLOCK, f32)
    for b in range(len(absmax)):
        x = values[b * BLOCK:(b + 1) * BLOCK]
        absmax[b] = np.max(np.abs(x))
        guarded = max(absmax[b], f32(1e-38))
        unit = x * (f32(1) / guarded) if len(x) == BLOCK else x / guarded
        unit = np.clip(unit, f32(-1), f32(1)).astype(f32)
        code = np.searchsorted(mids, unit, side="left")
        if nonzero:
            code[(code == 0) & (unit > 0)] = 1
        codes[b * BLOCK:(b + 1) * BLOCK] = code
    return codes, absmax


def adamw8bit(p0, grads, signed, unsigned):
    n = len(p0)
    p = p0.copy()
    s1, a1 = quantize(np.zeros(n, f32), midpoints(signed))
    s2, a2 = quantize(np.zeros(n, f32), midpoints(unsigned))
    for k, g in enumerate(grads):
        step = k + 1
        step_size = f32(LR / (1 - BETA1 ** step))
        decay = f32(1 - LR * WD)
        sqrt_correction2 = f32(np.sqrt(1 - BETA2 ** step))
        m = (signed[s1] * np.repeat(a1, BLOCK)[:n]).astype(f32)
        v = (unsigned[s2] * np.repeat(a2, BLOCK)[:n]).astype(f32)
        p = (p * decay).astype(f32)
        m = (m + (g - m) * (f32(1) - f32(BETA1))).astype(f32)
        v = (f32(BETA2) * v + (f32(1) - f32(BETA2)) * g * g).astype(f32)
        p = (p - step_size * m / (np.sqrt(v) / sqrt_correction2 + f32(EPS))).astype(f32)
        s1, a1 = quantize(m, midpoints(signed))
        s2, a2 = quantize(v, midpoints(unsigned), nonzero=True)
    return p, s1, a1, s2, a2


def bitsandbytes_adamw8bit(p0, grads):
    p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = bitsandbytes.optim.AdamW8bit([p], lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD)
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    return p.detach().numpy(), opt.state[p]


def main():
    out = Path(sys.argv[1]) / "int8_state"
    out.mkdir(exist_ok=True)
    rng = np.random.default_rng(11)
    n = BLOCK * 20 + 37
    scale = np.exp(rng.uniform(-6, 0, n)).astype(f32)  # magnitudes over several decades, as real gradients have
    p0 = rng.standard_normal(n).astype(f32)
    grads = [(rng.standard_normal(n) * scale).astype(f32) for _ in range(STEPS)]
    for g in grads:
        g[BLOCK * 3:BLOCK * 4] = 0
    signed = F.create_dynamic_map(signed=True).float().numpy()
    unsigned = F.create_dynamic_map(signed=False).float().numpy()
    p, s1, a1, s2, a2 = adamw8bit(p0, grads, signed, unsigned)
    tensors = {"dynamic_map_signed": signed, "dynamic_map_unsigned": unsigned, "p0": p0, "p": p,
               "state1": s1, "absmax1": a1, "state2": s2, "absmax2": a2}
    for k, g in enumerate(grads):
        tensors[f"grad.{k}"] = g
    save_file(tensors, str(out / "int8_state.safetensors"))
    (out / "README.md").write_text(
        "# int8_state\n\n8-bit blockwise AdamW (bitsandbytes' AdamW8bit: blocks of 256, its signed and unsigned "
        f"dynamic maps) after {STEPS} steps on one tensor, made by tests/reference/make_int8_state_fixtures.py with "
        f"numpy {np.__version__}, torch {torch.__version__} and bitsandbytes {bitsandbytes.__version__} (the maps); "
        "its docstring says how it compares with bitsandbytes' own CPU AdamW8bit.\n")
    if "--check" in sys.argv:
        for steps in (1, STEPS):
            theirs, state = bitsandbytes_adamw8bit(p0, grads[:steps])
            mine = adamw8bit(p0, grads[:steps], signed, unsigned)
            print(f"after {steps} step(s): parameters differ by at most {np.max(np.abs(mine[0] - theirs)):.3g} "
                  f"(updates up to {np.max(np.abs(theirs - p0)):.3g}); codes differ: first moment "
                  f"{np.count_nonzero(mine[1] != state['state1'].numpy())}, second "
                  f"{np.count_nonzero(mine[3] != state['state2'].numpy())} of {n}")


if __name__ == "__main__":
    main()
