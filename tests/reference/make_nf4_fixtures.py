#!/usr/bin/env python3
"""Writes tests/fixtures/nf4/nf4.safetensors: NF4 quantization as bitsandbytes defines it, for moetune's CPU
NF4 (ops/cpu/nf4.cpp) to match bit for bit.

A re-implementation of bitsandbytes' algorithm in numpy (float32 throughout). bitsandbytes is not in the
reference environment; with `--check` and bitsandbytes importable (pip install --target DIR bitsandbytes, then
PYTHONPATH=DIR) the script also runs bitsandbytes' own CPU quantize_4bit / dequantize_4bit on the same input and
asserts every tensor is identical (done for these fixtures with bitsandbytes 0.50.2's CPU backend):

  * 4-bit NF4, blocks of 64 elements: absmax = max |x| of the block (at least 1e-38 when dividing); each element
    x·(1/absmax) (a float32 reciprocal, then a multiply; the partial last block divides instead), clamped to
    [-1, 1], goes to the NF4 code value whose interval it falls in: the index is the number of the 15 float32
    midpoints (c[i] + c[i+1]) / 2 that it exceeds (strictly). Two indices per byte, the first element in the high
    nibble; an odd count pads with 0.0 (index 7).
  * Double quantization (bnb_4bit_use_double_quant / compress_statistics): offset = mean(absmax); the values
    absmax - offset are quantized blockwise (256 per block) to 8 bits with the signed dynamic map
    (create_dynamic_map(signed=True), 256 values): a per-block absmax2, then each value·(1/absmax2) (the partial
    last block divides), clamped to [-1, 1], goes to the nearest code (ties to the lower), by float32 midpoints:
    the rule of bitsandbytes' default (torch) backend and of its CUDA kernel's binary search. bitsandbytes 0.50.2's
    native CPU library searches approximately: it picks a neighbour of the nearest code for 3 of this fixture's
    301 absmax values (--check reports it); everything else is identical to it.
  * Dequantize: absmax = map[q]·absmax2 + offset; x = nf4[q4]·absmax.

The offset is numpy's float32 mean (pairwise summation), which equals torch.mean here; for other lengths torch's
float32 reduction may round the last bit differently.
The dynamic map is built as bitsandbytes builds it, with torch (its linspace rounding is part of the values).

Tensors: x [N] (N = 64·300 + 37: several double-quant blocks, an odd tail and an all-zero block), packed [ceil(N/2)]
U8, absmax_codes [blocks] U8, absmax_scales [ceil(blocks/256)] F32, offset [] F32, dequantized [N] F32,
nf4_code [16], dynamic_map [256]; and a second case "small." with N = 100 without double quantization
(absmax [2] F32 as is).

Run: /work/refenv/bin/python tests/reference/make_nf4_fixtures.py tests/fixtures [--check]
"""
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)
MIDPOINTS = ((NF4[:-1] + NF4[1:]) / np.float32(2)).astype(np.float32)  # in float32, as bitsandbytes computes them


def dynamic_map():
    """bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)."""
    data = []
    for i in range(7):
        boundaries = torch.linspace(0.1, 1, 2 ** i + 1)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0.0, 1.0]
    assert len(data) == 256
    data.sort()
    return torch.tensor(data).numpy().astype(np.float32)


def quantize_nf4(x):
    blocks = (len(x) + 63) // 64
    absmax = np.zeros(blocks, np.float32)
    idx = np.zeros(len(x), np.uint8)
    for b in range(blocks):
        v = x[b * 64:(b + 1) * 64]
        absmax[b] = np.max(np.abs(v))
        guarded = max(absmax[b], np.float32(1e-38))  # an all-zero block quantizes to code 7 (0.0)
        # A full block multiplies by the float32 reciprocal, the partial last one divides.
        scaled = v * (np.float32(1) / guarded) if len(v) == 64 else v / guarded
        scaled = np.clip(scaled, np.float32(-1), np.float32(1))
        idx[b * 64:(b + 1) * 64] = (scaled[:, None] > MIDPOINTS[None, :]).sum(axis=1)
    padded = np.concatenate([idx, np.full(len(idx) % 2, 7, np.uint8)])  # an odd count pads with 0.0 (code 7)
    return ((padded[0::2] << 4) | padded[1::2]).astype(np.uint8), absmax


def double_quantize(absmax, code):
    offset = np.mean(absmax, dtype=np.float32)  # numpy's float32 pairwise sum (moetune does the same)
    centred = (absmax - offset).astype(np.float32)
    blocks = (len(centred) + 255) // 256
    scales = np.zeros(blocks, np.float32)
    codes = np.zeros(len(centred), np.uint8)
    midpoints = ((code[:-1] + code[1:]) / np.float32(2)).astype(np.float32)
    for b in range(blocks):
        v = centred[b * 256:(b + 1) * 256]
        scales[b] = np.max(np.abs(v))
        guarded = max(scales[b], np.float32(1e-38))
        scaled = np.clip(v * (np.float32(1) / guarded) if len(v) == 256 else v / guarded, np.float32(-1), np.float32(1))
        codes[b * 256:(b + 1) * 256] = (scaled[:, None] > midpoints[None, :]).sum(axis=1)  # the nearest code
    return codes, scales, offset


def dequantize(packed, absmax, n):
    idx = np.stack([packed >> 4, packed & 15], axis=1).reshape(-1)[:n]
    return (NF4[idx] * np.repeat(absmax, 64)[:n]).astype(np.float32)


def main():
    out = Path(sys.argv[1]) / "nf4"
    out.mkdir(exist_ok=True)
    rng = np.random.default_rng(7)
    n = 64 * 300 + 37
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-3, 1, n))).astype(np.float32)
    x[64 * 5:64 * 6] = 0  # an all-zero block
    x[64 * 7] = np.float32(NF4[9] + NF4[10]) / 2 * np.max(np.abs(x[64 * 7:64 * 8]))  # near a midpoint
    code = dynamic_map()
    packed, absmax = quantize_nf4(x)
    codes, scales, offset = double_quantize(absmax, code)
    restored = (code[codes] * np.repeat(scales, 256)[:len(codes)] + offset).astype(np.float32)
    small = (rng.standard_normal(100)).astype(np.float32)
    small_packed, small_absmax = quantize_nf4(small)
    tensors = {"x": x, "packed": packed, "absmax_codes": codes, "absmax_scales": scales,
               "offset": np.array(offset, np.float32), "dequantized": dequantize(packed, restored, n),
               "nf4_code": NF4, "dynamic_map": code, "small.x": small, "small.packed": small_packed,
               "small.absmax": small_absmax, "small.dequantized": dequantize(small_packed, small_absmax, 100)}
    save_file(tensors, out / "nf4.safetensors")
    (out / "README.md").write_text(
        "# nf4\n\nNF4 (bitsandbytes' definition, double-quantized absmax) fixtures made by "
        f"tests/reference/make_nf4_fixtures.py with numpy {np.__version__} and torch {torch.__version__} "
        "(for the dynamic map): a re-implementation of bitsandbytes' NF4 with double-quantized absmax, checked "
        "against bitsandbytes 0.50.2's own CPU quantize_4bit/dequantize_4bit (installed aside with pip --target, "
        "run with --check): packed codes, absmax scales, offset, code maps and dequantization identical; 3 of 301 "
        "8-bit absmax codes differ by one code, where bitsandbytes' native CPU search misses the nearest code "
        "(moetune takes the nearest, as bitsandbytes' torch and CUDA paths do).\n")
    if "--check" in sys.argv:
        check_against_bitsandbytes(tensors)


def check_against_bitsandbytes(t):
    import bitsandbytes
    import bitsandbytes.functional as F

    q, state = F.quantize_4bit(torch.from_numpy(t["x"]), blocksize=64, compress_statistics=True, quant_type="nf4")
    assert np.array_equal(q.reshape(-1).numpy(), t["packed"])
    theirs = state.absmax.numpy().astype(int)
    differ = np.nonzero(theirs != t["absmax_codes"])[0]
    print(f"absmax codes: {len(differ)} of {len(theirs)} differ from bitsandbytes' native CPU search, each by one code:",
          np.abs(theirs[differ] - t["absmax_codes"][differ]).tolist())
    assert len(differ) <= len(theirs) // 50 and np.all(np.abs(theirs[differ] - t["absmax_codes"][differ]) == 1)
    assert np.array_equal(state.state2.absmax.numpy(), t["absmax_scales"])
    assert np.array_equal(state.state2.code.numpy(), t["dynamic_map"])
    assert float(state.offset) == float(t["offset"])
    state.absmax = torch.from_numpy(t["absmax_codes"])  # bitsandbytes' dequantization of these codes
    assert np.array_equal(F.dequantize_4bit(q, state).reshape(-1).numpy(), t["dequantized"])
    q, state = F.quantize_4bit(torch.from_numpy(t["small.x"]), blocksize=64, compress_statistics=False, quant_type="nf4")
    assert np.array_equal(q.reshape(-1).numpy(), t["small.packed"])
    assert np.array_equal(state.absmax.numpy(), t["small.absmax"])
    assert np.array_equal(F.dequantize_4bit(q, state).reshape(-1).numpy(), t["small.dequantized"])
    print("otherwise identical to bitsandbytes", bitsandbytes.__version__)


if __name__ == "__main__":
    main()
