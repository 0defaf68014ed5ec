#!/usr/bin/env python3
"""Prints the small table tests/ops/test_gated_delta_rule.cpp embeds: transformers' own Gated DeltaNet recurrence
(torch_chunk_gated_delta_rule, the path Qwen3NextGatedDeltaNet.forward takes for a prompt, chunk_size 64, fp32) on
inputs given by a formula both sides compute, and torch autograd's gradients of L = sum(w * out) with respect to the
raw a and b columns, dt_bias and A_log (the parts where transformers' conventions, softplus and the sign of g,
matter; q/k/v gradients are checked by finite differences in the test).

Shape: 1 key head, 2 value heads, Dk 3, Dv 2, 5 tokens of one document.
Input element i of tensor t is float32(sin(0.37 * i + 1.3 * t)) (times 2 for t = 0, 1: q and k), t = 0..7 for
q, k, v, a, b, dt_bias, A_log, w. The preprocessing below is Qwen3NextGatedDeltaNet.forward's, line for line.

Run:  /work/refenv/bin/python tests/reference/make_gated_delta_table.py
"""
import math

import torch
import torch.nn.functional as F
import transformers
from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

HK, HV, DK, DV, N = 1, 2, 3, 2, 5


def formula(t, shape, amplitude=1.0):
    count = math.prod(shape)
    values = [amplitude * math.sin(0.37 * i + 1.3 * t) for i in range(count)]
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def run(chunk_size=64):
    q, k = formula(0, (1, N, HK, DK), 2.0), formula(1, (1, N, HK, DK), 2.0)
    v = formula(2, (1, N, HV, DV))
    a, b = formula(3, (1, N, HV)), formula(4, (1, N, HV))
    dt_bias, a_log = formula(5, (HV,)), formula(6, (HV,))
    w = formula(7, (1, N, HV, DV))
    leaves = [a, b, dt_bias, a_log]
    for t in leaves:
        t.requires_grad_(True)
    beta = b.sigmoid()
    g = -a_log.float().exp() * F.softplus(a.float() + dt_bias)
    query = q.repeat_interleave(HV // HK, dim=2)
    key = k.repeat_interleave(HV // HK, dim=2)
    out, _ = torch_chunk_gated_delta_rule(query, key, v, g=g, beta=beta, chunk_size=chunk_size,
                                          use_qk_l2norm_in_kernel=True)
    (out * w).sum().backward()
    return out.detach(), [t.grad for t in leaves]


def main():
    out, grads = run()
    small_out, _ = run(chunk_size=2)  # several chunks: the same function
    assert torch.allclose(out, small_out, rtol=1e-5, atol=1e-6)
    print(f"// transformers {transformers.__version__}, torch {torch.__version__}")
    for name, t in [("kOut", out)] + list(zip(["kDa", "kDb", "kDdtBias", "kDaLog"], grads)):
        values = ", ".join(f"{x:.8e}" for x in t.flatten().tolist())
        print(f"const std::vector<double> {name}{{{values}}};")


if __name__ == "__main__":
    main()
