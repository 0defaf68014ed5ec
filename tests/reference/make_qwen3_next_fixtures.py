#!/usr/bin/env python3
"""Builds qwen3_next_tiny, the whole-model fp32 parity fixture for Qwen3-Next (Qwen3NextForCausalLM).

Config: V 96, H 32, four layers [linear_attention, full_attention, linear_attention, full_attention]; gated
attention 4 heads x 16 / 2 kv heads with RoPE on a quarter of each head (the default partial_rotary_factor);
Gated DeltaNet 2 key heads x 8 and 4 value heads x 6 (two value heads per key head, Dk != Dv), conv kernel 4; MoE
layers of 6 experts top-2 (width 16, norm_topk_prob) with a gated shared expert of 24, layer 2 a dense MLP of 48
(mlp_only_layers); the load-balancing loss (output_router_logits, coefficient 0.01); untied. Weights: transformers'
init, then every parameter drawn at random (scale 0.25; A_log and dt_bias too) so that none is special.
  model.safetensors, config.json   save_pretrained's output (one tensor per expert, in_proj_qkvz / in_proj_ba)
  expected.json, parity.*          as make_nemotron_h_fixtures.py writes them

Packed documents: transformers' torch Gated DeltaNet path ignores position_ids (the conv window and the recurrent
state run across documents, as Nemotron-H's Mamba2 does), so the packed case runs every Gated DeltaNet on each
document alone (make_nemotron_h_fixtures.mixer_per_document); moetune restarts both at each document.

Run:  /work/refenv/bin/python tests/reference/make_qwen3_next_fixtures.py tests/fixtures
"""
import sys
from pathlib import Path

import torch
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
from transformers.models.qwen3_next import modeling_qwen3_next

sys.path.insert(0, str(Path(__file__).parent))
import make_nemotron_h_fixtures  # noqa: E402
import make_parity  # noqa: E402

NAME = "qwen3_next_tiny"
# At 0.5 the tiny model's logits reach ~11 and transformers' own chunked and recurrent fp32 forms of the rule differ
# by ~1e-5 per token; at 0.25 its fp32 logits sit 2e-6 from an fp64 run, so the fixture's 1e-5 bound measures moetune.
WEIGHT_SCALE = 0.25
CONFIG = dict(
    architectures=["Qwen3NextForCausalLM"], vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6,
    linear_conv_kernel_dim=4, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
    shared_expert_intermediate_size=24, mlp_only_layers=[2], norm_topk_prob=True, output_router_logits=True,
    router_aux_loss_coef=0.01, max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0,
    bos_token_id=2, eos_token_id=1, use_cache=False)


def build(folder: Path):
    torch.manual_seed(make_parity.SEED)
    model = Qwen3NextForCausalLM(Qwen3NextConfig(**CONFIG)).float()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * WEIGHT_SCALE)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    return model.num_parameters()


def main(root: Path):
    folder = root / NAME
    count = build(folder)
    make_nemotron_h_fixtures.write_fixture(folder, NAME, "Qwen3NextForCausalLM", count,
                                          modeling_qwen3_next.Qwen3NextGatedDeltaNet, coef=CONFIG["router_aux_loss_coef"])


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"))
