#!/usr/bin/env python3
"""Config spellings and options of every family against transformers, on random tiny models made here.

For each case: a config built with transformers (its own class, its own spellings: what `save_pretrained` writes),
a model drawn in fp32 from a fixed seed and saved; then `moetune eval` (CPU, fp32) against transformers' mean
token cross-entropy on the same lines (1e-5 relative), and `moetune inspect --json`'s parameter count against
transformers' (embedding and head counted as transformers counts them). A case may also rewrite config.json after
saving (the older spellings checkpoints on the Hub still carry: `rope_scaling`, `rope_theta` at the top level).

Gradients too, on the CPU: one AdamW step with eps = 1e6 moves each weight by -lr·g/(|g| + eps), linear in g, so
the saved folder gives back every gradient moetune computed (g = -Δ·eps / (lr - |Δ|)), compared per tensor with
transformers' backward on the same line (2e-3 relative: what the fp32 weights' resolution leaves of Δ).

With --device cuda the GPU engine evaluates (bf16: 1e-2 relative to transformers' fp32 loss) and trains; the folder
it saves is scored by transformers and by moetune's CPU engine at 1e-5 either way.

Nothing here is committed as a fixture: it is a sweep to run after touching config parsing or a block. Run:
  /work/refenv/bin/python tests/reference/sweep_config_parity.py build/src/moetune/moetune [--device cuda] [case ...]
(scripts/reference_env.sh makes /work/refenv on a machine without torch; the GPU machine's python3 has both.)
"""
import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

from check_eval import IMAGE_TEXT_ONLY, load_reference, mean_token_loss, no_aux_loss

TOLERANCE = 1e-5  # fp32 against fp32
GPU_TOLERANCE = 1e-2  # the GPU engine's bf16 against transformers' fp32
VOCAB = 96
LENGTHS = [2, 5, 17, 40, 70]  # the last past the sliding windows below


def sequences() -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in LENGTHS]


BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
MOE = dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64}
DSV3 = dict(BASE, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
            kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_group=2,
            topk_group=1, first_k_dense_replace=1, num_key_value_heads=4)
GLM4_MOE = dict(BASE, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                n_group=1, topk_group=1, first_k_dense_replace=1, head_dim=16)
DSV2 = dict(BASE, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=2,
            kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            first_k_dense_replace=1, num_key_value_heads=4)
GRANITE_MULTIPLIERS = dict(embedding_multiplier=12.0, attention_multiplier=0.15, residual_multiplier=0.22,
                           logits_scaling=8.0)
QWEN3_NEXT = dict(BASE, num_hidden_layers=4, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                  linear_key_head_dim=16, linear_value_head_dim=8, num_experts=6, num_experts_per_tok=2,
                  moe_intermediate_size=32, shared_expert_intermediate_size=24)
QWEN3_5 = dict(BASE, num_hidden_layers=4, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
               linear_key_head_dim=16, linear_value_head_dim=8)
QWEN3_5_VL = dict(vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=64,
                                     patch_size=4, spatial_merge_size=2, temporal_patch_size=2,
                                     num_position_embeddings=16),
                  image_token_id=VOCAB - 4, video_token_id=VOCAB - 3, vision_start_token_id=VOCAB - 2,
                  vision_end_token_id=VOCAB - 1)
QWEN3_5_MOE = dict(QWEN3_5, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                   shared_expert_intermediate_size=24)
GRANITE_MOE = dict(BASE, num_local_experts=6, num_experts_per_tok=2, intermediate_size=32)
GRANITE_HYBRID = dict(GRANITE_MOE, num_local_experts=4, shared_intermediate_size=24, mamba_n_heads=8, mamba_d_state=16,
                      mamba_chunk_size=16, layer_types=["linear_attention", "full_attention", "linear_attention"])
GEMMA3_TEXT = dict(BASE, head_dim=16, sliding_window=8)
GEMMA3_TEXT.pop("tie_word_embeddings")  # Gemma3Config's own field decides
GEMMA3_VL = dict(vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                    image_size=28, patch_size=14),
                 mm_tokens_per_image=4, image_token_index=VOCAB - 1, boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2)
ERNIE_MOE = dict(BASE, moe_num_experts=8, moe_k=2, moe_intermediate_size=32, moe_num_shared_experts=1)
DOTS1 = dict(BASE, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
             first_k_dense_replace=1, sliding_window=None)
GLM4_MOE_LITE = dict(DSV3, n_group=1, topk_group=1, routed_scaling_factor=1.8)
GLM4_MOE_LITE.pop("first_k_dense_replace")  # not Glm4MoeLiteConfig's: mlp_layer_types places the dense layers
NEMOTRON_H = dict(vocab_size=VOCAB, hidden_size=32, layers_block_type=["mamba", "moe", "attention", "mlp", "moe"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=24, mamba_num_heads=4,
                  mamba_head_dim=8, n_groups=2, ssm_state_size=8, conv_kernel=3, chunk_size=4, n_routed_experts=8,
                  num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=12,
                  moe_shared_expert_intermediate_size=20, moe_latent_size=16, routed_scaling_factor=2.5,
                  norm_topk_prob=True, tie_word_embeddings=False, max_position_embeddings=256, use_cache=False)
# Phi3Config's pad_token_id default (32000) lies outside the tiny vocabulary: nn.Embedding would refuse it.
PHI3 = dict(BASE, pad_token_id=90, bos_token_id=1, eos_token_id=2)
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 128,
            "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8], "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0]}

# (name, model_type, config kwargs, optional config.json rewrite)
CASES = [
    ("llama plain", "llama", dict(BASE), None),
    ("llama biases", "llama", dict(BASE, attention_bias=True, mlp_bias=True), None),
    ("llama head_dim 32", "llama", dict(BASE, head_dim=32), None),
    ("llama mqa tied", "llama", dict(BASE, num_key_value_heads=1, tie_word_embeddings=True), None),
    ("llama rope linear", "llama", dict(BASE, rope_parameters={"rope_type": "linear", "rope_theta": 5000.0, "factor": 2.0}), None),
    ("llama rope dynamic", "llama", dict(BASE, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}), None),
    ("llama rope llama3", "llama", dict(BASE, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                              "original_max_position_embeddings": 32}), None),
    ("llama rope yarn", "llama", dict(BASE, rope_parameters=dict(YARN)), None),
    ("llama rope yarn attention_factor", "llama", dict(BASE, rope_parameters=dict(YARN, attention_factor=0.8, beta_fast=16.0, beta_slow=2.0)), None),
    # longrope below original_max_position_embeddings (its short factors; the lines reach position 69), with the
    # attention factor derived from max_position_embeddings / original (256 / 96) and given.
    ("llama rope longrope", "llama", dict(BASE, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                                "short_factor": [1.0 + 0.1 * i for i in range(8)],
                                                                "long_factor": [2.0 + 0.1 * i for i in range(8)],
                                                                "original_max_position_embeddings": 96}), None),
    # and past it (original context 32: the lines of 40 and 70 tokens run the long factors), in a family whose config
    # reads original_max_position_embeddings from the RoPE dict.
    ("llama rope longrope long factors", "llama", dict(BASE, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                                             "short_factor": [1.0 + 0.1 * i for i in range(8)],
                                                                             "long_factor": [2.0 + 0.3 * i for i in range(8)],
                                                                             "original_max_position_embeddings": 32}), None),
    ("qwen3 rope longrope attention_factor", "qwen3", dict(BASE, head_dim=16, rope_parameters={
        "rope_type": "longrope", "rope_theta": 5000.0, "short_factor": [1.0 + 0.05 * i for i in range(8)],
        "long_factor": [3.0] * 8, "original_max_position_embeddings": 128, "factor": 4.0, "attention_factor": 1.3}), None),
    ("llama old rope_scaling spelling", "llama", dict(BASE), "old_rope"),
    ("llama gelu", "llama", dict(BASE, hidden_act="gelu"), None),
    ("llama gelu_pytorch_tanh", "llama", dict(BASE, hidden_act="gelu_pytorch_tanh"), None),
    ("qwen2 relu", "qwen2", dict(BASE, hidden_act="relu"), None),
    ("qwen3_moe gelu_new", "qwen3_moe", dict(BASE, head_dim=16, hidden_act="gelu_new", **MOE), None),
    ("qwen2_moe quick_gelu", "qwen2_moe", dict(BASE, shared_expert_intermediate_size=48, hidden_act="quick_gelu", **MOE), None),
    ("mixtral gelu_fast", "mixtral", dict(BASE, num_local_experts=6, num_experts_per_tok=2, hidden_act="gelu_fast"), None),
    ("deepseek_v3 gelu", "deepseek_v3", dict(DSV3, hidden_act="gelu"), None),
    ("glm4_moe swish", "glm4_moe", dict(GLM4_MOE, hidden_act="swish"), None),
    ("mistral sliding 16", "mistral", dict(BASE, sliding_window=16), None),
    ("mistral head_dim 8", "mistral", dict(BASE, head_dim=8, sliding_window=None), None),
    ("qwen2 plain", "qwen2", dict(BASE), None),
    ("qwen2 sliding layers", "qwen2", dict(BASE, use_sliding_window=True, sliding_window=16, max_window_layers=1), None),
    ("qwen2 tied", "qwen2", dict(BASE, tie_word_embeddings=True), None),
    ("qwen3 plain", "qwen3", dict(BASE, head_dim=16), None),
    ("qwen3 attention_bias", "qwen3", dict(BASE, head_dim=16, attention_bias=True), None),
    ("qwen3 sliding", "qwen3", dict(BASE, head_dim=16, use_sliding_window=True, sliding_window=16, max_window_layers=1), None),
    ("qwen3 yarn", "qwen3", dict(BASE, head_dim=16, rope_parameters=dict(YARN)), None),
    ("qwen3_moe plain", "qwen3_moe", dict(BASE, head_dim=16, **MOE), None),
    ("qwen3_moe no norm_topk", "qwen3_moe", dict(BASE, head_dim=16, norm_topk_prob=False, **MOE), None),
    ("qwen3_moe sparse step 2", "qwen3_moe", dict(BASE, head_dim=16, decoder_sparse_step=2, **MOE), None),
    ("qwen3_moe mlp_only_layers", "qwen3_moe", dict(BASE, head_dim=16, mlp_only_layers=[0, 2], **MOE), None),
    ("qwen3_moe tied top1", "qwen3_moe", dict(BASE, head_dim=16, tie_word_embeddings=True, **dict(MOE, num_experts_per_tok=1)), None),
    ("qwen3_moe sliding", "qwen3_moe", dict(BASE, head_dim=16, use_sliding_window=True, sliding_window=16, max_window_layers=1, **MOE), None),
    ("qwen2_moe plain", "qwen2_moe", dict(BASE, shared_expert_intermediate_size=48, **MOE), None),
    ("qwen2_moe norm_topk", "qwen2_moe", dict(BASE, shared_expert_intermediate_size=48, norm_topk_prob=True, **MOE), None),
    ("qwen2_moe sparse step 2", "qwen2_moe", dict(BASE, shared_expert_intermediate_size=48, decoder_sparse_step=2, **MOE), None),
    ("qwen2_moe mlp_only_layers", "qwen2_moe", dict(BASE, shared_expert_intermediate_size=48, mlp_only_layers=[1], **MOE), None),
    ("qwen2_moe qkv_bias off", "qwen2_moe", dict(BASE, shared_expert_intermediate_size=48, qkv_bias=False, **MOE), None),
    ("mixtral plain", "mixtral", dict(BASE, num_local_experts=6, num_experts_per_tok=2), None),
    ("mixtral sliding head_dim", "mixtral", dict(BASE, num_local_experts=4, num_experts_per_tok=3, sliding_window=16, head_dim=8), None),
    ("deepseek_v3 plain", "deepseek_v3", dict(DSV3), None),
    ("deepseek_v3 no q_lora", "deepseek_v3", dict(DSV3, q_lora_rank=None), None),
    ("deepseek_v3 rope not interleaved", "deepseek_v3", dict(DSV3, rope_interleave=False), None),
    ("deepseek_v3 no norm_topk", "deepseek_v3", dict(DSV3, norm_topk_prob=False, routed_scaling_factor=2.5), None),
    ("deepseek_v3 groups 4 keep 2", "deepseek_v3", dict(DSV3, n_group=4, topk_group=2, num_experts_per_tok=3), None),
    ("deepseek_v3 no dense", "deepseek_v3", dict(DSV3, first_k_dense_replace=0), None),
    ("deepseek_v3 two shared", "deepseek_v3", dict(DSV3, n_shared_experts=2), None),
    ("deepseek_v3 attention_bias", "deepseek_v3", dict(DSV3, attention_bias=True), None),
    ("deepseek_v3 tied", "deepseek_v3", dict(DSV3, tie_word_embeddings=True), None),
    ("deepseek_v3 yarn mscale", "deepseek_v3", dict(DSV3, rope_parameters=dict(YARN, mscale=1.0, mscale_all_dim=0.8)), None),
    ("deepseek_v3 yarn mscale equal", "deepseek_v3", dict(DSV3, rope_parameters=dict(YARN, mscale=0.707, mscale_all_dim=0.707)), None),
    ("deepseek_v3 old rope_scaling spelling", "deepseek_v3", dict(DSV3), "old_rope_yarn"),
    ("deepseek_v3 longrope", "deepseek_v3", dict(DSV3, rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                                        "short_factor": [1.0, 1.3, 1.9, 2.4],
                                                                        "long_factor": [4.0] * 4, "factor": 2.0,
                                                                        "original_max_position_embeddings": 128}), None),
    ("deepseek_v3 longrope long factors", "deepseek_v3", dict(DSV3, rope_parameters={
        "rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.3, 1.9, 2.4],
        "long_factor": [2.0, 3.0, 5.0, 7.0], "factor": 4.0, "original_max_position_embeddings": 16}), None),
    ("qwen3_moe norm_topk", "qwen3_moe", dict(BASE, head_dim=16, norm_topk_prob=True, **MOE), None),
    ("nemotron_h plain", "nemotron_h", dict(NEMOTRON_H), None),
    ("nemotron_h no latent", "nemotron_h", dict(NEMOTRON_H, moe_latent_size=None), None),
    ("nemotron_h one group no norm", "nemotron_h", dict(NEMOTRON_H, n_group=1, topk_group=1, norm_topk_prob=False), None),
    ("nemotron_h pattern spelling", "nemotron_h", dict(NEMOTRON_H), "pattern"),
    ("nemotron_h chunk 16 state 16", "nemotron_h", dict(NEMOTRON_H, chunk_size=16, ssm_state_size=16, n_groups=1), None),
    ("nemotron_h mamba bias", "nemotron_h", dict(NEMOTRON_H, use_bias=True, use_conv_bias=False), None),
    ("glm4_moe plain", "glm4_moe", dict(GLM4_MOE), None),
    ("glm4_moe air-like biases", "glm4_moe", dict(GLM4_MOE, attention_bias=True, routed_scaling_factor=2.5), None),
    ("glm4_moe qk norm groups", "glm4_moe", dict(GLM4_MOE, use_qk_norm=True, n_group=4, topk_group=2, num_experts_per_tok=3), None),
    ("glm4_moe whole rope no dense tied", "glm4_moe", dict(GLM4_MOE, partial_rotary_factor=1.0, first_k_dense_replace=0,
                                                          tie_word_embeddings=True, norm_topk_prob=False), None),
    ("glm4_moe odd rotary head_dim 42", "glm4_moe", dict(GLM4_MOE, head_dim=42, n_shared_experts=2), None),
    ("glm4_moe rope_parameters quarter", "glm4_moe", dict(GLM4_MOE, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                                                     "partial_rotary_factor": 0.25}), None),
    ("glm4_moe_lite plain", "glm4_moe_lite", dict(GLM4_MOE_LITE), None),
    ("glm4_moe_lite layer types no q_lora", "glm4_moe_lite", dict(GLM4_MOE_LITE, q_lora_rank=None,
                                                                  mlp_layer_types=["sparse", "dense", "sparse"]), None),
    ("glm4_moe_lite yarn groups tied", "glm4_moe_lite", dict(GLM4_MOE_LITE, n_group=4, topk_group=2, num_experts_per_tok=3,
                                                             tie_word_embeddings=True, rope_interleave=False,
                                                             rope_parameters=dict(YARN, mscale=1.0, mscale_all_dim=0.8)), None),
    ("glm4_moe_lite head_dim spelling", "glm4_moe_lite", dict(GLM4_MOE_LITE), "head_dim_for_rope"),
    ("gpt_oss plain", "gpt_oss", dict(BASE, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
                                      intermediate_size=32), None),
    ("gpt_oss all full attention", "gpt_oss", dict(BASE, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
                                                   intermediate_size=32, layer_types=["full_attention"] * 3), None),
    ("phi3 plain", "phi3", dict(PHI3), None),
    ("phi3 partial rotary sliding", "phi3", dict(PHI3, partial_rotary_factor=0.5, sliding_window=16), None),
    ("phi3 odd partial rotary gqa1 tied", "phi3", dict(PHI3, partial_rotary_factor=0.7, num_key_value_heads=1,
                                                        tie_word_embeddings=True, pad_token_id=None), None),
    ("phi3 longrope", "phi3", dict(PHI3, rope_parameters=dict(LONGROPE)), None),
    ("phi3 longrope su spelling", "phi3", dict(PHI3, rope_parameters=dict(LONGROPE)), "old_rope_su"),
    ("phi3 gelu sliding", "phi3", dict(PHI3, hidden_act="gelu_pytorch_tanh", sliding_window=8), None),
    ("phi3 partial longrope (Phi-4-mini)", "phi3", dict(PHI3, partial_rotary_factor=0.75, tie_word_embeddings=True,
                                                         rope_parameters=dict(LONGROPE, short_factor=LONGROPE["short_factor"][:6],
                                                                              long_factor=LONGROPE["long_factor"][:6])), None),
    ("phi3 partial longrope attention_factor", "phi3", dict(PHI3, rope_parameters=dict(
        LONGROPE, partial_rotary_factor=0.5, attention_factor=0.7, short_factor=LONGROPE["short_factor"][:4],
        long_factor=LONGROPE["long_factor"][:4])), None),
    # longrope past its original context (16): the lines of 17, 40 and 70 tokens run the long factors at every
    # position, those of 2 and 5 the short ones (transformers decides per forward pass: max(position_ids) + 1 > 16;
    # Phi3Config takes the top level's original_max_position_embeddings over the dict's, 4096 by default),
    # the gradient check's line of 40 the long ones; whole heads, partial heads, and DeepSeek-V3's latent attention.
    ("phi3 longrope long factors", "phi3", dict(PHI3, original_max_position_embeddings=16, rope_parameters=dict(LONGROPE)), None),
    ("phi3 partial longrope long factors", "phi3", dict(PHI3, partial_rotary_factor=0.75, original_max_position_embeddings=16,
                                                        rope_parameters=dict(
        LONGROPE, original_max_position_embeddings=16, short_factor=LONGROPE["short_factor"][:6],
        long_factor=LONGROPE["long_factor"][:6])), None),
    ("smollm3 plain", "smollm3", dict(BASE, pad_token_id=90, bos_token_id=1, eos_token_id=2), None),
    ("smollm3 NoPE every 2nd, biases, untied", "smollm3", dict(BASE, no_rope_layer_interval=2, attention_bias=True,
                                                               mlp_bias=True, tie_word_embeddings=False, pad_token_id=None), None),
    ("smollm3 no_rope_layers sliding NoPE yarn", "smollm3", dict(BASE, no_rope_layers=[1, 0, 0], use_sliding_window=True,
                                                                 sliding_window=16, rope_parameters=dict(YARN),
                                                                 pad_token_id=None), None),
    ("smollm3 layer_types without use_sliding_window", "smollm3", dict(
        BASE, sliding_window=8, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        pad_token_id=None), None),
    ("olmoe plain", "olmoe", dict(BASE, num_experts=6, num_experts_per_tok=2, intermediate_size=32), None),
    ("olmoe gqa biases norm_topk tied", "olmoe", dict(BASE, num_experts=6, num_experts_per_tok=3, intermediate_size=32,
                                                      attention_bias=True, norm_topk_prob=True, tie_word_embeddings=True,
                                                      pad_token_id=None), None),
    ("olmoe aux loss yarn", "olmoe", dict(BASE, num_experts=4, num_experts_per_tok=2, intermediate_size=32,
                                          num_key_value_heads=4, output_router_logits=True,
                                          rope_parameters=dict(YARN)), None),
    ("ministral every layer sliding", "ministral", dict(BASE, sliding_window=16, head_dim=16), None),
    ("ministral layer_types head_dim tied", "ministral", dict(BASE, sliding_window=8, head_dim=32, tie_word_embeddings=True,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"]), None),
    ("deepseek_v2 lite-like greedy", "deepseek_v2", dict(DSV2), None),
    ("deepseek_v2 group_limited_greedy scaled q_lora", "deepseek_v2", dict(DSV2, topk_method="group_limited_greedy",
                                                                         n_group=4, topk_group=2, num_experts_per_tok=3,
                                                                         routed_scaling_factor=16.0, q_lora_rank=24), None),
    ("deepseek_v2 yarn mscale biases tied no dense", "deepseek_v2", dict(DSV2, attention_bias=True, tie_word_embeddings=True,
                                                                        first_k_dense_replace=0, routed_scaling_factor=0.5,
                                                                        rope_parameters=dict(YARN, mscale=0.707, mscale_all_dim=0.707)), None),
    ("deepseek_v2 old rope_scaling yarn spelling", "deepseek_v2", dict(DSV2, q_lora_rank=24), "old_rope_yarn"),
    ("olmo2 plain", "olmo2", dict(BASE, pad_token_id=None), None),
    ("olmo2 biases head_dim mqa tied yarn", "olmo2", dict(BASE, attention_bias=True, head_dim=32, num_key_value_heads=1,
                                                         tie_word_embeddings=True, rope_parameters=dict(YARN)), None),
    ("olmo2 gelu rope_theta old spelling", "olmo2", dict(BASE, hidden_act="gelu_pytorch_tanh"), "old_rope"),
    # OLMo-3: Olmo3Config's layer types (3 sliding, 1 full; the lines of 40 and 70 tokens pass the window of 16),
    # RoPE per layer type (yarn on the full layers, another theta on the sliding ones), and the old rope_scaling
    # spelling (the full layers' schedule, the sliding ones at default RoPE with default_theta).
    ("olmo3 default layer types", "olmo3", dict(BASE, num_hidden_layers=4, sliding_window=16, pad_token_id=None), None),
    ("olmo3 per-type rope biases gqa", "olmo3", dict(BASE, sliding_window=8, attention_bias=True, num_key_value_heads=1,
                                                    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                                    rope_parameters={"full_attention": dict(YARN),
                                                                     "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}}), None),
    ("olmo3 old rope_scaling spelling tied", "olmo3", dict(BASE, sliding_window=16, tie_word_embeddings=True,
                                                          layer_types=["full_attention", "sliding_attention", "full_attention"]),
     "old_rope_olmo3"),
    # EXAONE 4.0: Exaone4Config's layer types from sliding_window_pattern (layers 0-2 slide and rotate, layer 3 attends
    # without positions), every layer rotating without a window, layer_types written, YaRN.
    ("exaone4 pattern NoPE full layers", "exaone4", dict(BASE, num_hidden_layers=4, sliding_window=16,
                                                         sliding_window_pattern=4, head_dim=16), None),
    ("exaone4 no window every layer rotates tied", "exaone4", dict(BASE, sliding_window=None,
                                                                  layer_types=["full_attention"] * 3,
                                                                  tie_word_embeddings=True), None),
    ("exaone4 layer_types yarn gqa", "exaone4", dict(BASE, sliding_window=8, num_key_value_heads=1, rope_parameters=dict(YARN),
                                                     layer_types=["sliding_attention", "full_attention", "sliding_attention"]), None),
    # K-EXAONE (exaone_moe): EXAONE 4.0's attention in pre-norm layers, a dense first layer then DeepSeek-V3's MoE
    # under ExaoneMoeConfig's names (num_experts, num_shared_experts); mlp_layer_types written; groups.
    ("exaone_moe plain", "exaone_moe", dict(BASE, num_hidden_layers=4, sliding_window=16, head_dim=16, num_experts=8,
                                            num_experts_per_tok=2, moe_intermediate_size=32, num_shared_experts=1,
                                            pad_token_id=None), None),
    ("exaone_moe mlp_layer_types groups tied", "exaone_moe", dict(BASE, sliding_window=8, num_experts=8, num_experts_per_tok=3,
                                                                  n_group=4, topk_group=2, moe_intermediate_size=32,
                                                                  num_shared_experts=2, norm_topk_prob=False,
                                                                  mlp_layer_types=["sparse", "dense", "sparse"],
                                                                  layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                                                  tie_word_embeddings=True, pad_token_id=None), None),
    # Solar Open: Llama's attention (q/k/v biases, none on o) and GLM-4-MoE's MoE on every layer.
    ("solar_open plain", "solar_open", dict(BASE, head_dim=16, n_routed_experts=8, num_experts_per_tok=2,
                                            moe_intermediate_size=32, n_shared_experts=1), None),
    ("solar_open groups biases tied", "solar_open", dict(BASE, head_dim=16, n_routed_experts=8, num_experts_per_tok=3,
                                                         n_group=4, topk_group=2, moe_intermediate_size=32,
                                                         n_shared_experts=2, attention_bias=True, norm_topk_prob=False,
                                                         routed_scaling_factor=2.5, tie_word_embeddings=True), None),
    # FlexOlmo: OLMo-2's output norms around OLMoE's MoE layer (CPU only: the GPU refuses its MoE layers so far).
    ("flex_olmo plain", "flex_olmo", dict(BASE, num_experts=6, num_experts_per_tok=2, intermediate_size=32,
                                          pad_token_id=None), None),
    ("flex_olmo biases norm_topk aux loss tied", "flex_olmo", dict(BASE, num_experts=6, num_experts_per_tok=3,
                                                                    intermediate_size=32, attention_bias=True,
                                                                    norm_topk_prob=True, output_router_logits=True,
                                                                    tie_word_embeddings=True, pad_token_id=None), None),
    ("dots1 plain", "dots1", dict(DOTS1), None),
    ("dots1 groups renormalised scaled biases", "dots1", dict(DOTS1, n_group=4, topk_group=2, num_experts_per_tok=3,
                                                             norm_topk_prob=True, routed_scaling_factor=2.5,
                                                             attention_bias=True, n_shared_experts=2), None),
    # Dots1Config's own rule: sliding_window set, the layers from max_window_layers on slide (the lines of 40 and
    # 70 tokens pass the window of 16); no dense layer, tied, head_dim written.
    ("dots1 max_window_layers sliding tied", "dots1", dict(DOTS1, sliding_window=16, max_window_layers=1,
                                                          first_k_dense_replace=0, tie_word_embeddings=True,
                                                          head_dim=32), None),
    ("dots1 layer_types yarn", "dots1", dict(DOTS1, sliding_window=8, rope_parameters=dict(YARN),
                                            layer_types=["sliding_attention", "full_attention", "sliding_attention"]), None),
    ("minimax_m2 plain", "minimax_m2", dict(BASE, head_dim=16, num_local_experts=8, num_experts_per_tok=2,
                                           intermediate_size=32), None),
    ("minimax_m2 partial rotary tied gqa", "minimax_m2", dict(BASE, head_dim=16, num_local_experts=6, num_experts_per_tok=3,
                                                             intermediate_size=32, num_key_value_heads=1,
                                                             tie_word_embeddings=True,
                                                             rope_parameters={"rope_type": "default", "rope_theta": 5e6,
                                                                              "partial_rotary_factor": 0.5}), None),
    # Gemma 3 (text): norms scaling by 1 + weight (left at transformers' zeros here: the sweep randomises matrices
    # and biases), sandwich norms, q/k norms, sqrt(hidden) embedding scale, query_pre_attn_scalar.
    # Gemma 1: Llama's layers with 1 + weight norms and the scaled embedding.
    ("gemma plain", "gemma", dict(BASE, head_dim=16), None),
    ("gemma biases mqa gelu tied old rope", "gemma", dict(BASE, head_dim=16, attention_bias=True, num_key_value_heads=1,
                                                          hidden_act="gelu", tie_word_embeddings=True), "old_rope"),
    ("gemma3 plain", "gemma3_text", dict(BASE, head_dim=16, sliding_window=8), None),
    ("gemma3 v4 spelling pattern linear", "gemma3_text", dict(BASE, head_dim=16, sliding_window=8), "old_rope_gemma3"),
    ("gemma3 biases tied scalar yarn gelu", "gemma3_text", dict(BASE, head_dim=16, sliding_window=8, attention_bias=True,
                                                                tie_word_embeddings=True, query_pre_attn_scalar=20,
                                                                hidden_activation="gelu",
                                                                layer_types=["full_attention", "sliding_attention",
                                                                             "full_attention"],
                                                                rope_parameters={"full_attention": dict(YARN),
                                                                                 "sliding_attention": {
                                                                                     "rope_type": "default",
                                                                                     "rope_theta": 500.0}}), None),
    # Gemma 3's vision-language checkpoints (gemma-3-4b and up) trained on text: AutoModelForCausalLM builds
    # Gemma3ForConditionalGeneration; moetune trains its language model and saves the vision tower back unchanged.
    ("gemma3 vision-language", "gemma3", dict(GEMMA3_VL, text_config=dict(GEMMA3_TEXT, hidden_activation="gelu")), None),
    ("gemma3 vision-language untied v5 names", "gemma3",
     dict(GEMMA3_VL, tie_word_embeddings=False, text_config=dict(GEMMA3_TEXT, attention_bias=True,
                                                               rope_parameters={"full_attention": dict(YARN),
                                                                                "sliding_attention": {
                                                                                    "rope_type": "default",
                                                                                    "rope_theta": 500.0}})),
     "in_memory_names"),
    # ERNIE 4.5: RoPE on interleaved pairs; the MoE router chooses by softmax + moe_statics' correction bias
    # (randomised here like every 2-D tensor), weighs by the softmax; shared experts; MoE layers by start / end /
    # interval.
    ("ernie4_5_moe plain", "ernie4_5_moe", ERNIE_MOE, None),
    ("ernie4_5_moe interval no shared tied yarn gelu", "ernie4_5_moe",
     dict(ERNIE_MOE, moe_layer_start_index=0, moe_layer_interval=2, moe_num_shared_experts=0, tie_word_embeddings=True,
          hidden_act="gelu", rope_parameters=dict(YARN)), None),
    ("ernie4_5_moe end index head_dim", "ernie4_5_moe",
     dict(ERNIE_MOE, num_hidden_layers=4, moe_layer_end_index=2, head_dim=32, moe_num_shared_experts=2), None),
    ("ernie4_5 dense", "ernie4_5", dict(BASE, head_dim=16), None),
    ("ernie4_5 dense tied linear rope", "ernie4_5", dict(BASE, head_dim=8, tie_word_embeddings=True), "old_rope"),
    # Arcee (AFM-4.5B): Llama's attention and an ungated relu² MLP.
    ("arcee plain", "arcee", dict(BASE), None),
    ("arcee biases tied yarn head_dim", "arcee", dict(BASE, attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
                                                      head_dim=8, rope_parameters=dict(YARN)), None),
    # IBM Granite: Llama's (Mixtral's) layers with μP's four multipliers (granite-3.0-2b's embedding, residual and
    # logits values; an attention multiplier unlike 1 / sqrt(head_dim)); GraniteMoe's stacked experts and
    # topk-then-softmax router, GraniteMoeShared's shared MLP beside the block.
    ("granite plain", "granite", dict(BASE), None),
    ("granite multipliers biases mqa tied", "granite", dict(BASE, **GRANITE_MULTIPLIERS, attention_bias=True,
                                                            mlp_bias=True, num_key_value_heads=1,
                                                            tie_word_embeddings=True), None),
    ("granite multipliers yarn head_dim", "granite", dict(BASE, **GRANITE_MULTIPLIERS, head_dim=8,
                                                          rope_parameters=dict(YARN)), None),
    ("granitemoe plain", "granitemoe", dict(GRANITE_MOE, **GRANITE_MULTIPLIERS), None),
    ("granitemoe aux loss top3 gelu biases old rope", "granitemoe",
     dict(GRANITE_MOE, **GRANITE_MULTIPLIERS, num_experts_per_tok=3, hidden_act="gelu", attention_bias=True,
          output_router_logits=True, router_aux_loss_coef=0.01), "old_rope"),
    ("granitemoe in-memory names tied", "granitemoe", dict(GRANITE_MOE, tie_word_embeddings=True, logits_scaling=0.5),
     "granite_in_memory_names"),
    ("granitemoeshared plain", "granitemoeshared", dict(GRANITE_MOE, **GRANITE_MULTIPLIERS, shared_intermediate_size=24),
     None),
    ("granitemoeshared no shared tied gqa", "granitemoeshared",
     dict(GRANITE_MOE, **GRANITE_MULTIPLIERS, shared_intermediate_size=0, tie_word_embeddings=True), None),
    # Granite 4.0 (GraniteMoeHybrid): Mamba2 and attention layers (NoPE unless position_embedding_type is rope),
    # each followed by the MoE with its shared MLP, or the shared MLP alone when there are no experts.
    ("granitemoehybrid plain", "granitemoehybrid", dict(GRANITE_HYBRID, **GRANITE_MULTIPLIERS), None),
    ("granitemoehybrid dense rope old layer names", "granitemoehybrid",
     dict(GRANITE_HYBRID, **GRANITE_MULTIPLIERS, num_local_experts=0, position_embedding_type="rope"), "old_layer_names"),
    # GLM-4 (dense, -0414): sandwich norms, q/k/v biases, RoPE on interleaved pairs of half of each head.
    ("glm4 plain", "glm4", dict(BASE, head_dim=16, pad_token_id=0), None),
    ("glm4 no bias whole rotary tied mqa", "glm4", dict(BASE, head_dim=16, attention_bias=False, num_key_value_heads=1,
                                                       partial_rotary_factor=1.0, tie_word_embeddings=True,
                                                       pad_token_id=0), None),
    ("glm4 quarter rotary in rope_parameters", "glm4",
     dict(BASE, head_dim=16, pad_token_id=3, rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                              "partial_rotary_factor": 0.25}), None),
    # GraniteSWA / GraniteMoeSWA: per-layer sliding windows, per-layer RoPE thetas (0: NoPE), learned sinks.
    ("granite_swa plain", "granite_swa", dict(BASE, **GRANITE_MULTIPLIERS, sliding_window=4,
                                              layer_types=["full_attention", "sliding_attention", "sliding_attention"]),
     None),
    ("granite_swa default pattern NoPE layer untied", "granite_swa",
     dict(BASE, sliding_window=8, layer_rope_theta=[10000.0, 0, 5000.0], attention_bias=True, mlp_bias=True), None),
    ("granitemoe_swa shared NoPE layer", "granitemoe_swa",
     dict(GRANITE_MOE, **GRANITE_MULTIPLIERS, sliding_window=4, shared_intermediate_size=24,
          layer_rope_theta=[10000.0, 0, 10000.0]), None),
    ("granitemoehybrid groups biases aux loss tied", "granitemoehybrid",
     dict(GRANITE_HYBRID, **GRANITE_MULTIPLIERS, mamba_n_groups=2, mamba_proj_bias=True, mamba_conv_bias=False,
          mamba_chunk_size=8, attention_bias=True, output_router_logits=True, tie_word_embeddings=True), None),
    # Qwen3-Next: Gated DeltaNet and gated attention layers (from layer_types, else every full_attention_interval-th
    # layer full), each followed by the MoE with its gated shared expert or a dense MLP; 1 + weight norms.
    ("qwen3_next plain", "qwen3_next", dict(QWEN3_NEXT), None),
    ("qwen3_next interval 2 dense layer biases no renorm aux loss", "qwen3_next",
     dict(QWEN3_NEXT, full_attention_interval=2, mlp_only_layers=[1], attention_bias=True, norm_topk_prob=False,
          output_router_logits=True), None),
    ("qwen3_next one value head a key head half rotary tied sparse step 2", "qwen3_next",
     dict(QWEN3_NEXT, linear_num_value_heads=2, linear_value_head_dim=16, linear_conv_kernel_dim=3,
          decoder_sparse_step=2, tie_word_embeddings=True,
          rope_parameters={"rope_type": "default", "rope_theta": 5000.0, "partial_rotary_factor": 0.5}), None),
    ("qwen3_next old layer names no experts", "qwen3_next",
     dict(QWEN3_NEXT, num_experts=0, layer_types=["linear_attention", "full_attention", "linear_attention",
                                                  "full_attention"]), "old_layer_names"),
    # Qwen3.5's language models: Qwen3-Next's layers with the Gated DeltaNet's projections as four tensors; a dense
    # MLP on every layer (Qwen3.5) or the MoE (Qwen3.5-MoE, its router always renormalising); the multimodal RoPE's
    # keys, which text positions make plain RoPE.
    ("qwen3_5 plain", "qwen3_5_text", dict(QWEN3_5), None),
    ("qwen3_5 mrope keys tied interval 2 biases", "qwen3_5_text",
     dict(QWEN3_5, head_dim=32, full_attention_interval=2, attention_bias=True, tie_word_embeddings=True,
          rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                           "mrope_section": [2, 1, 1], "mrope_interleaved": True}), None),
    ("qwen3_5_moe plain", "qwen3_5_moe_text", dict(QWEN3_5_MOE), None),
    # Qwen3.5's released vision-language checkpoints trained on text: the vision tower carried through unchanged.
    ("qwen3_5 vision-language", "qwen3_5", dict(QWEN3_5_VL, text_config=dict(QWEN3_5)), None),
    ("qwen3_5_moe vision-language tied", "qwen3_5_moe",
     dict(QWEN3_5_VL, text_config=dict(QWEN3_5_MOE), tie_word_embeddings=True), None),
    ("qwen3_5_moe aux loss one value head a key head", "qwen3_5_moe_text",
     dict(QWEN3_5_MOE, output_router_logits=True, router_aux_loss_coef=0.01, linear_num_value_heads=2,
          linear_value_head_dim=16), None),
]


def rewrite(config_path: Path, how: str) -> None:
    """Older spellings of the same config, as Hub checkpoints still carry them."""
    config = json.loads(config_path.read_text())
    parameters = config.pop("rope_parameters", None) or {}
    if how == "old_rope":
        config["rope_theta"] = parameters.get("rope_theta", 10000.0)
        config["rope_scaling"] = {"type": "linear", "factor": 2.0}
    elif how == "old_rope_yarn":
        config["rope_theta"] = parameters.get("rope_theta", 10000.0)
        config["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                  "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}
    elif how == "old_rope_olmo3":  # OLMo-3's released spelling: rope_scaling for the full-attention layers
        config["rope_theta"] = 20000.0
        config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                  "attention_factor": 1.2, "beta_fast": 32, "beta_slow": 1}
    elif how == "old_rope_gemma3":  # Gemma 3's released spelling: thetas at the top, layer types from a pattern
        config["rope_theta"] = 20000.0
        config["rope_local_base_freq"] = 5000.0
        config["rope_scaling"] = {"rope_type": "linear", "factor": 4.0}
        config.pop("layer_types", None)
        config.pop("_sliding_window_pattern", None)
        config["sliding_window_pattern"] = 2
    elif how == "old_rope_su":  # Phi-3's early longrope spelling, which Phi3Config reads as longrope
        config["rope_scaling"] = dict(parameters, type="su")
        config["rope_scaling"].pop("rope_type", None)
        config["rope_theta"] = config["rope_scaling"].pop("rope_theta", 10000.0)
    elif how == "in_memory_names":  # the names transformers' model holds (and loads), not the ones it saves
        from safetensors.torch import load_file, save_file
        renames = [("language_model.model.", "model.language_model."), ("language_model.lm_head.", "lm_head."),
                   ("vision_tower.", "model.vision_tower."), ("multi_modal_projector.", "model.multi_modal_projector.")]
        weights = config_path.parent / "model.safetensors"
        state = {}
        for key, value in load_file(weights).items():
            for old, new in renames:
                if key.startswith(old):
                    key = new + key[len(old):]
                    break
            state[key] = value
        save_file(state, weights, metadata={"format": "pt"})
        if parameters:  # rewrite() took it from the top level, where this case keeps it
            config["rope_parameters"] = parameters
    elif how == "granite_in_memory_names":  # GraniteMoe's v5 in-memory names, which transformers loads too
        from safetensors.torch import load_file, save_file
        renames = [("block_sparse_moe.input_linear.weight", "block_sparse_moe.experts.gate_up_proj"),
                   ("block_sparse_moe.output_linear.weight", "block_sparse_moe.experts.down_proj"),
                   ("block_sparse_moe.router.layer.weight", "block_sparse_moe.router.weight")]
        weights = config_path.parent / "model.safetensors"
        state = {}
        for key, value in load_file(weights).items():
            for old, new in renames:
                key = key.replace(old, new)
            state[key] = value
        save_file(state, weights, metadata={"format": "pt"})
        config["rope_parameters"] = parameters
    elif how == "old_layer_names":  # Granite 4.0's released spelling: layer_types of mamba / attention
        config["rope_parameters"] = parameters
        names = {"linear_attention": "mamba", "full_attention": "attention"}
        config["layer_types"] = [names[t] for t in config["layer_types"]]
    elif how == "head_dim_for_rope":  # Glm4MoeLiteConfig's attribute_map: head_dim is qk_rope_head_dim
        config["rope_parameters"] = parameters
        config["head_dim"] = config.pop("qk_rope_head_dim")
    elif how == "pattern":  # Nemotron-H's released spelling: one character a layer
        config.pop("layers_block_type", None)
        config["hybrid_override_pattern"] = "ME*-E"
    config_path.write_text(json.dumps(config, indent=2))


def transformers_loss(folder: Path, lines: list[list[int]]) -> tuple[float, int, int]:
    model = load_reference(folder)
    return *mean_token_loss(model, lines), model.num_parameters()


def run_case(binary: str, device: str, scratch: Path, data: Path, lines, name, model_type, kwargs, how) -> bool:
    folder = scratch / name.replace(" ", "_")
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **kwargs)
    builder = AutoModelForImageTextToText if model_type in IMAGE_TEXT_ONLY else AutoModelForCausalLM
    model = builder.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # weights large enough that every block's mistakes show in the loss
        for key, p in model.named_parameters():
            if p.dim() >= 2 or "bias" in key or "sinks" in key:
                p.normal_(0.0, 0.2 if p.dim() >= 2 else 0.1)
    model.save_pretrained(folder)
    if how:
        rewrite(folder / "config.json", how)
    expected, tokens, parameters = transformers_loss(folder, lines)
    run = subprocess.run([binary, "eval", str(folder), "--data", str(data), "--json", "--device", device],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL {name}: moetune eval exited {run.returncode}: {run.stderr.strip()[-400:]}")
        return False
    report = json.loads(run.stdout)
    gap = abs(report["loss"] - expected) / expected
    inspect = subprocess.run([binary, "inspect", str(folder), "--json"], capture_output=True, text=True)
    total = json.loads(inspect.stdout)["total_parameters"] if inspect.returncode == 0 else None
    ok = gap <= (TOLERANCE if device == "cpu" else GPU_TOLERANCE) and report["tokens"] == tokens and total == parameters
    print(f"{'ok  ' if ok else 'FAIL'} {name}: moetune {report['loss']:.6f} transformers {expected:.6f} "
          f"(gap {gap:.1e}); parameters moetune {total} transformers {parameters}")
    ok = ok and saved_model_loads(binary, device, folder, data, lines, name, report["loss"])
    return ok and (device != "cpu" or gradients_match(binary, folder, lines[-2], name))


GRADIENT_LR, GRADIENT_EPS, GRADIENT_TOLERANCE = 1e5, 1e6, 2e-3


def in_memory(state: dict, key: str):
    """transformers' in-memory parameter `key` from a saved state dict: as stored, under Nemotron-H's backbone.
    prefix or Mixtral's block_sparse_moe, or fused from the per-expert tensors save_pretrained writes for v5's fused
    experts (gate then up)."""
    mixtral = key.replace(".mlp.", ".block_sparse_moe.")  # Mixtral's checkpoint name for its MoE block
    # Gemma 3's vision-language model saves its language model as language_model.model.* / language_model.lm_head.*
    wrapped = key.replace("model.language_model.", "language_model.model.", 1).replace("lm_head.", "language_model.lm_head.", 1)
    # GraniteMoe saves its experts stacked under the names its checkpoints had before v5's experts module.
    granite = (key.replace("experts.gate_up_proj", "input_linear.weight").replace("experts.down_proj", "output_linear.weight")
               .replace("block_sparse_moe.router.weight", "block_sparse_moe.router.layer.weight"))
    # Qwen3.5's wrapper saves what its text model holds as model.* under model.language_model.*.
    qwen3_5_wrapped = key.replace("model.", "model.language_model.", 1)
    for stored in (key, key.replace("model.", "backbone.", 1), mixtral, wrapped, granite, qwen3_5_wrapped):
        if stored in state:
            return state[stored]
    saved_prefix = mixtral.rpartition(".")[0] + "."
    prefix, _, leaf = (mixtral if any(k.startswith(saved_prefix) for k in state) else key).rpartition(".")
    parts = {"gate_up_proj": [("gate_proj", "up_proj"), ("w1", "w3")], "down_proj": [("down_proj",), ("w2",)]}.get(leaf)
    if not prefix.endswith("experts") or parts is None:
        return None
    for names in parts:
        experts = []
        while all(f"{prefix}.{len(experts)}.{n}.weight" in state for n in names):
            experts.append(torch.cat([state[f"{prefix}.{len(experts)}.{n}.weight"] for n in names], dim=0))
        if experts:
            return torch.stack(experts)
    return None


def gradients_match(binary: str, folder: Path, ids: list[int], name: str) -> bool:
    """moetune's gradient of one line's mean token cross-entropy, read back from one AdamW step, against transformers'."""
    from safetensors.torch import load_file
    data = folder.with_name(folder.name + "_line.jsonl")
    data.write_text(json.dumps({"input_ids": ids}) + "\n")
    out = folder.with_name(folder.name + "_step")
    run = subprocess.run([binary, "finetune", "--set", f"model={folder}", "--set", f"data.train={data}", "--set",
                          f"output.dir={out}", "--set", "training.max_steps=1", "--set", "training.device=cpu", "--set",
                          f"optimizer.lr={GRADIENT_LR}", "--set", f"optimizer.eps={GRADIENT_EPS}", "--set",
                          "optimizer.max_grad_norm=0", "--set", "schedule.warmup_steps=0", "--set",
                          "data.validation_fraction=0", "--set", "training.micro_batch_size=1", "--set",
                          "data.max_length=128", "--set", "training.aux_loss=off"], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL {name} (gradients): moetune finetune exited {run.returncode}: {run.stderr.strip()[-400:]}")
        return False
    before = {}
    for file in sorted(folder.glob("*.safetensors")):
        before.update(load_file(file))
    after = {}
    for file in sorted((out / "final-model").glob("*.safetensors")):
        after.update(load_file(file))
    model = load_reference(folder)  # eval mode: no dropout, which moetune's configs have none of either
    input_ids = torch.tensor([ids])
    model(input_ids=input_ids, labels=input_ids, use_cache=False, **no_aux_loss(model)).loss.backward()
    worst, worst_name, compared = 0.0, "", 0
    for key, parameter in model.named_parameters():
        if parameter.grad is None:
            continue
        old, new = in_memory(before, key), in_memory(after, key)
        if old is None or new is None:
            continue  # a tied head: its gradient is the embedding's
        delta = new.double() - old.double()
        ours = -delta * GRADIENT_EPS / (GRADIENT_LR - delta.abs())
        theirs = parameter.grad.double()
        if ours.shape != theirs.shape:
            ours = ours.reshape(theirs.shape) if ours.numel() == theirs.numel() else ours
        scale = max(theirs.norm().item(), 1e-3)
        error = (ours - theirs).norm().item() / scale
        compared += 1
        if error > worst:
            worst, worst_name = error, key
    ok = worst <= GRADIENT_TOLERANCE and compared > 0 and math.isfinite(worst)
    print(f"{'ok  ' if ok else 'FAIL'} {name} (gradients of {compared} tensors): worst {worst:.1e} ({worst_name})")
    return ok


def tensors_carried_through(folder: Path, final: Path, name: str) -> bool:
    """A vision-language model's vision tower and projector, which moetune does not train, saved back bit for bit."""
    from safetensors.torch import load_file
    before, after = {}, {}
    for source, state in ((folder, before), (final, after)):
        for file in sorted(source.glob("*.safetensors")):
            state.update(load_file(file))
    carried = [k for k in before if "vision_tower." in k or "multi_modal_projector." in k or "visual." in k]
    changed = [k for k in carried if k not in after or not torch.equal(before[k], after[k])]
    if changed:
        print(f"FAIL {name} (carried tensors): {len(changed)} of {len(carried)} not saved back as read, first {changed[0]}")
    return not changed


def saved_model_loads(binary: str, device: str, folder: Path, data: Path, lines, name: str, before: float) -> bool:
    """Two training steps, then transformers loads the saved folder and scores it as moetune's CPU engine does."""
    out = folder.with_name(folder.name + "_trained")
    run = subprocess.run([binary, "finetune", "--set", f"model={folder}", "--set", f"data.train={data}", "--set",
                          f"output.dir={out}", "--set", "training.max_steps=2", "--set", f"training.device={device}",
                          "--set", "optimizer.lr=1e-2", "--set", "schedule.warmup_steps=0", "--set",
                          "data.validation_fraction=0", "--set", "training.micro_batch_size=1", "--set",
                          "data.max_length=128"], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL {name} (trained): moetune finetune exited {run.returncode}: {run.stderr.strip()[-400:]}")
        return False
    final = out / "final-model"
    if not tensors_carried_through(folder, final, name):
        return False
    expected, _, _ = transformers_loss(final, lines)
    report = json.loads(subprocess.run([binary, "eval", str(final), "--data", str(data), "--json", "--device", "cpu"],
                                       check=True, capture_output=True, text=True).stdout)
    gap = abs(report["loss"] - expected) / expected
    ok = gap <= TOLERANCE and abs(report["loss"] - before) > 1e-3
    print(f"{'ok  ' if ok else 'FAIL'} {name} (trained, saved, loaded by transformers): moetune {report['loss']:.6f} "
          f"transformers {expected:.6f} (gap {gap:.1e}; before training {before:.6f})")
    return ok


def main(binary: str, device: str, only: list[str]) -> int:
    lines = sequences()
    failures, skipped, ran = 0, 0, 0
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "eval.jsonl"
        data.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in lines))
        for case in CASES:
            if only and not any(o in case[0] for o in only):
                continue
            try:
                ran += 1
                failures += not run_case(binary, device, Path(scratch), data, lines, *case)
            except Exception as error:  # a config transformers itself refuses: say so, count it and go on
                skipped += 1
                print(f"SKIP {case[0]}: transformers: {type(error).__name__}: {str(error)[:300]}")
    print(f"{ran - failures - skipped} passed, {skipped} skipped (transformers refused the config), {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("only", nargs="*", help="run the cases whose names contain any of these")
    arguments = parser.parse_intermixed_args()  # the cases may follow --device
    sys.exit(main(arguments.binary, arguments.device, arguments.only))
