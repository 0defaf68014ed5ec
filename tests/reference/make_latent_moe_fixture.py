#!/usr/bin/env python3
"""Builds the Nemotron-H MoE fixture: transformers' NemotronHMoE (fp32, training mode) for the C++ reference
(model/latent_moe.h) to match at 1e-5: output, d(input) and every parameter's gradient of sum(out * g).

Config: hidden 16, 8 routed experts (top-3, n_group 2, topk_group 1, norm_topk_prob, routed_scaling_factor 2.5),
moe_intermediate_size 6, shared expert 10, relu2. Two cases:
  latent   moe_latent_size 12 (fc1_latent_proj / fc2_latent_proj), mlp_bias true
  plain    no latent, mlp_bias false
Weights random (std 0.3), e_score_correction_bias random (std 0.1); x [10, 16], g [10, 16].
<case>.safetensors: the weights by HF name (experts.up_proj [E, I, D], experts.down_proj [E, D, I]), x, g,
out, dx and grad.<name>. versions.json records the versions.

Run:  /work/refenv/bin/python tests/reference/make_latent_moe_fixture.py tests/fixtures/nemotron_h_moe
"""
import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import NemotronHConfig
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMoE

BASE = dict(hidden_size=16, n_routed_experts=8, num_experts_per_tok=3, n_group=2, topk_group=1, norm_topk_prob=True,
            routed_scaling_factor=2.5, moe_intermediate_size=6, moe_shared_expert_intermediate_size=10,
            mlp_hidden_act="relu2", layers_block_type=["moe"])
CASES = {"latent": dict(moe_latent_size=12, mlp_bias=True), "plain": dict(moe_latent_size=None, mlp_bias=False)}


def main(out_dir):
    torch.manual_seed(18)
    for case, extra in CASES.items():
        moe = NemotronHMoE(NemotronHConfig(**BASE, **extra)).float().train()
        with torch.no_grad():
            for p in moe.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
            moe.gate.e_score_correction_bias.copy_(torch.randn(8) * 0.1)
        x = torch.randn(10, 16, requires_grad=True)
        g = torch.randn(10, 16)
        out = moe(x)
        (out * g).sum().backward()
        tensors = {n: p.detach().clone() for n, p in moe.named_parameters()}
        tensors["gate.e_score_correction_bias"] = moe.gate.e_score_correction_bias.detach().clone()
        tensors.update({"x": x.detach(), "g": g, "out": out.detach(), "dx": x.grad})
        tensors.update({f"grad.{n}": p.grad for n, p in moe.named_parameters()})
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(Path(out_dir) / f"{case}.safetensors"))
    versions = {"transformers": transformers.__version__, "torch": torch.__version__}
    (Path(out_dir) / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
