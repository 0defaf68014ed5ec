#!/usr/bin/env python3
"""Builds the tiny Hugging Face models the C++ tests check moetune against.

Each fixture is a folder saved by transformers' save_pretrained (random weights, fixed seed) plus
`reference.safetensors` (input_ids and the logits transformers computes for them, in fp32) and
`expected.json` (parameter count as transformers counts it, and the versions that made the fixture).

Run:  python3 tests/reference/make_fixtures.py tests/fixtures [fixture names...]   (default: all)
Needs torch and transformers v5 (the fixtures in the repo were made with the versions in expected.json).
"""
import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, Qwen3Config, Qwen3MoeConfig, AutoModelForCausalLM
from transformers import MixtralConfig, Qwen2MoeConfig, DeepseekV3Config, Qwen2Config, MistralConfig, Glm4MoeConfig
from transformers import Glm4MoeLiteConfig, MiniMaxM2Config, OlmoeConfig, Phi3Config, SmolLM3Config
from transformers import DeepseekV2Config, Dots1Config, Olmo2Config, Olmo3Config, Exaone4Config, SolarOpenConfig, FlexOlmoConfig, ExaoneMoeConfig
from transformers import Gemma3TextConfig, GemmaConfig, Ernie4_5_MoeConfig, GraniteMoeHybridConfig, GraniteMoeSharedConfig

VOCAB = 96

DEEPSEEK_V3_TINY = dict(
    vocab_size=VOCAB, hidden_size=24, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8,
    qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
    n_shared_experts=2, first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5,
    rope_interleave=True, max_position_embeddings=64,
    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                     "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1,
                     "mscale": 0.707, "mscale_all_dim": 1.0},
    tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)

# The dense fixtures' shared sizes (Qwen3, Qwen2).
DENSE_TINY = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64)

MIXTRAL_TINY = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
    tie_word_embeddings=False, output_router_logits=True, router_aux_loss_coef=0.01)

FIXTURES = {
    # MoE with one dense layer among MoE layers, renormalised top-k, untied, fp32, sharded into several files.
    "qwen3_moe_tiny": dict(
        config=Qwen3MoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=16, mlp_only_layers=[1], norm_topk_prob=True,
            rope_theta=1e6, max_position_embeddings=64, tie_word_embeddings=False,
            output_router_logits=True, router_aux_loss_coef=0.01),
        dtype=torch.float32, max_shard_size="40KB"),
    # MoE with decoder_sparse_step 2, no renormalisation, tied embeddings, bf16.
    "qwen3_moe_tied_bf16": dict(
        config=Qwen3MoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=8, decoder_sparse_step=2, norm_topk_prob=False,
            max_position_embeddings=64, tie_word_embeddings=True),
        dtype=torch.bfloat16, max_shard_size=None),
    # Dense Qwen3 (q/k norm), tied embeddings, bf16.
    "qwen3_tiny": dict(
        config=Qwen3Config(**DENSE_TINY, num_hidden_layers=2, head_dim=8, tie_word_embeddings=True),
        dtype=torch.bfloat16, max_shard_size=None),
    # Llama with llama3 RoPE scaling and attention / MLP biases, fp32.
    "llama_tiny": dict(
        config=LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128,
            attention_bias=True, mlp_bias=True, bos_token_id=1, eos_token_id=2,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
            tie_word_embeddings=False),
        dtype=torch.float32, max_shard_size=None),
    # Like qwen3_moe_tiny but every layer MoE, no renormalisation, tied embeddings, fp32 (parity tests).
    "qwen3_moe_tied_f32": dict(
        config=Qwen3MoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1, mlp_only_layers=[],
            norm_topk_prob=False, rope_theta=1e6, max_position_embeddings=64, tie_word_embeddings=True,
            output_router_logits=True, router_aux_loss_coef=0.02),
        dtype=torch.float32, max_shard_size=None),
    # Like qwen3_tiny but fp32 and untied (parity tests).
    "qwen3_f32": dict(
        config=Qwen3Config(**DENSE_TINY, num_hidden_layers=2, head_dim=8, tie_word_embeddings=False),
        dtype=torch.float32, max_shard_size=None),
    # Mixtral: every layer MoE (always renormalised top-k), no sliding window, untied, fp32, sharded.
    "mixtral_tiny": dict(
        config=MixtralConfig(**MIXTRAL_TINY, sliding_window=None, rope_theta=1e6),
        dtype=torch.float32, max_shard_size="40KB"),
    # Qwen2-MoE: q/k/v biases, sigmoid-gated shared expert, one dense layer among MoE layers, no
    # renormalisation, untied, fp32.
    "qwen2_moe_tiny": dict(
        config=Qwen2MoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=16, shared_expert_intermediate_size=24, mlp_only_layers=[1],
            decoder_sparse_step=1, norm_topk_prob=False, max_position_embeddings=64,
            tie_word_embeddings=False, output_router_logits=True, router_aux_loss_coef=0.01),
        dtype=torch.float32, max_shard_size=None),
    # DeepSeek-V3: MLA with q_lora_rank, interleaved YaRN RoPE (mscale != mscale_all_dim, so both the cos/sin
    # factor and the softmax scale differ from 1), v head dim (6) below the q/k one (12); one dense layer then
    # MoE layers with 4 groups of 2 experts (top-2 groups, top-3 experts), correction bias, renormalised,
    # scaled by 2.5, 2 shared experts; untied, fp32.
    "deepseek_v3_tiny": dict(
        config=DeepseekV3Config(**DEEPSEEK_V3_TINY),
        dtype=torch.float32, max_shard_size=None),
    # DeepSeek-V3 without q_lora_rank (q_proj), attention biases, default RoPE not interleaved, v head dim (10)
    # above the q/k one (8), one group (top-k over all), no renormalisation, scaled by 1.5, every layer MoE,
    # one shared expert, tied embeddings, fp32.
    "deepseek_v3_qproj_tied": dict(
        config=DeepseekV3Config(
            vocab_size=VOCAB, hidden_size=24, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=2, q_lora_rank=None, kv_lora_rank=8, qk_nope_head_dim=4,
            qk_rope_head_dim=4, v_head_dim=10, n_routed_experts=6, n_group=1, topk_group=1, num_experts_per_tok=2,
            n_shared_experts=1, first_k_dense_replace=0, norm_topk_prob=False, routed_scaling_factor=1.5,
            rope_interleave=False, attention_bias=True, max_position_embeddings=64,
            rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
            tie_word_embeddings=True, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # DeepSeek-V3 as transformers reads the spellings that differ from their defaults: rope_interleave and
    # norm_topk_prob null (falsy: rotate-half RoPE, no renormalisation), YaRN's truncate null (no rounding of the
    # correction range), and a pad_token_id that make_parity.py's plain batch holds (nn.Embedding's padding_idx:
    # that row's lookups pass no gradient; the tied head still adds its own). Tied, fp32.
    "deepseek_v3_pad_nulls": dict(
        config=DeepseekV3Config(**{
            **DEEPSEEK_V3_TINY, "num_hidden_layers": 2, "n_shared_experts": 1, "norm_topk_prob": None,
            "routed_scaling_factor": 2.0, "rope_interleave": None, "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1,
                                "truncate": None}}),
        dtype=torch.float32, max_shard_size=None, pad_from_plain_batch=True),
    # Dense Qwen3 with sliding windows where Qwen3Config puts them (use_sliding_window, layers from
    # max_window_layers = 1 on slide, a window of 4 keys, shorter than the parity batches' documents) and YaRN RoPE
    # (factor 4 over an original context of 16, truncated correction range); untied, fp32.
    "qwen3_sliding_yarn": dict(
        config=Qwen3Config(
            **DENSE_TINY, num_hidden_layers=3, head_dim=8, use_sliding_window=True, sliding_window=4, max_window_layers=1,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 16},
            tie_word_embeddings=False),
        dtype=torch.float32, max_shard_size=None),
    # Dense Qwen2 (Qwen2.5): q/k/v biases, no o bias, sliding windows of 4 keys from max_window_layers = 2 on,
    # tied embeddings, fp32.
    "qwen2_tiny": dict(
        config=Qwen2Config(
            **DENSE_TINY, num_hidden_layers=3, use_sliding_window=True, sliding_window=4, max_window_layers=2, rope_theta=1e6,
            tie_word_embeddings=True),
        dtype=torch.float32, max_shard_size=None),
    # Mistral: head_dim (16) other than hidden / heads (8), a sliding window of 5 keys on every layer, linear RoPE,
    # untied, fp32.
    "mistral_tiny": dict(
        config=MistralConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
            sliding_window=5, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
            tie_word_embeddings=False),
        dtype=torch.float32, max_shard_size=None),
    # Mixtral with a sliding window of 3 keys on every layer and dynamic RoPE (default RoPE below
    # max_position_embeddings); untied, fp32.
    "mixtral_sliding_dynamic": dict(
        config=MixtralConfig(**MIXTRAL_TINY, sliding_window=3,
                             rope_parameters={"rope_type": "dynamic", "rope_theta": 1e6, "factor": 2.0}),
        dtype=torch.float32, max_shard_size=None),
    # GLM-4-MoE (GLM-4.5 / 4.6 / 4.7): RoPE on the first half of each head (partial_rotary_factor 0.5, the config
    # class's default), q/k/v biases (attention_bias), per-head q/k norms (use_qk_norm); one dense layer then MoE
    # layers with DeepSeek-V3's router (4 groups of 2 experts, top-2 groups, top-3 experts, correction bias,
    # renormalised, scaled by 2.5) and 2 shared experts; untied, fp32.
    "glm4_moe_tiny": dict(
        config=Glm4MoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, attention_bias=True, use_qk_norm=True, moe_intermediate_size=8,
            n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3, n_shared_experts=2,
            first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5, max_position_embeddings=64,
            tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # GLM-4.5-Air's attention (no q/k norm, no biases) with a quarter of each 16-wide head rotating
    # (partial_rotary_factor 0.25 in rope_parameters, rope_theta 1e6), one group, no renormalisation, every layer
    # MoE, tied embeddings, fp32.
    "glm4_moe_quarter_tied": dict(
        config=Glm4MoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, attention_bias=False, use_qk_norm=False, moe_intermediate_size=8,
            n_routed_experts=6, n_group=1, topk_group=1, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=0, norm_topk_prob=False, routed_scaling_factor=1.5, max_position_embeddings=64,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
            tie_word_embeddings=True, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # GLM-4-MoE-Lite (GLM-4.7-Flash): DeepSeek-V3's latent attention (q_lora_rank, interleaved default RoPE on the
    # rope part, v head dim 10 above the q/k nope part) in a decoder whose MLPs follow mlp_layer_types (MoE, dense,
    # MoE), the MoE layers DeepSeek-V3's (4 groups of 2 experts, top-2 groups, top-3 experts, correction bias,
    # renormalised, scaled by 1.8) with one shared expert; untied, fp32.
    "glm4_moe_lite_tiny": dict(
        config=Glm4MoeLiteConfig(
            vocab_size=VOCAB, hidden_size=24, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=10, n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3,
            n_shared_experts=1, mlp_layer_types=["sparse", "dense", "sparse"], norm_topk_prob=True,
            routed_scaling_factor=1.8, rope_interleave=True, max_position_embeddings=64,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # Phi-3 (Phi3ForCausalLM): q/k/v in one qkv_proj and gate/up in one gate_up_proj, RoPE on the first half of
    # each head (partial_rotary_factor 0.5 in rope_parameters: the q and k rows of qkv_proj are kept in the engine's
    # partial order, v's as stored), a sliding window of 5 keys on every layer, the padding row an id of the parity
    # batch, untied, fp32.
    "phi3_tiny": dict(
        config=Phi3Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, sliding_window=5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
        dtype=torch.float32, max_shard_size=None, pad_from_plain_batch=True),
    # Phi-4-mini's attention: longrope (its short factors: every position the tests use is below
    # original_max_position_embeddings 32) over three quarters of each 8-wide head (partial_rotary_factor 0.75:
    # 6 dimensions rotate, cos and sin times the attention factor √(1 + ln 4 / ln 32), the other 2 pass unscaled),
    # GQA, tied embeddings, the padding row an id of the parity batch, fp32.
    "phi4_mini_tiny": dict(
        config=Phi3Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, original_max_position_embeddings=32,
            partial_rotary_factor=0.75,  # Phi3Config's top-level keys win over the dict's
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                             "original_max_position_embeddings": 32, "short_factor": [1.0, 1.3, 1.9],
                             "long_factor": [1.0, 2.0, 4.0]},
            tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
        dtype=torch.float32, max_shard_size=None, pad_from_plain_batch=True),
    # SmolLM3: the last of 3 layers without RoPE (no_rope_layer_interval 3: NoPE) and with a sliding window of 5 keys
    # (use_sliding_window: SmolLM3Config slides its NoPE layers), tied embeddings (the config class's default), the
    # padding row an id of the parity batch, fp32. No attention_bias: on a NoPE layer k_proj.bias's gradient is zero
    # by symmetry (it shifts every score of a query alike), fp32 noise on both sides that no relative bound can
    # compare (sweep_config_parity.py's smollm3 cases train biases on NoPE layers against an absolute floor).
    "smollm3_tiny": dict(
        config=SmolLM3Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, no_rope_layer_interval=3, use_sliding_window=True,
            sliding_window=5, rope_parameters={"rope_type": "default", "rope_theta": 5e6},
            bos_token_id=1, eos_token_id=2),
        dtype=torch.float32, max_shard_size=None, pad_from_plain_batch=True),
    # OLMoE: q_norm over all of q_proj's output and k_norm over all of k_proj's (not per head), GQA, every layer MoE
    # with 6 experts, top-3, no renormalisation, the load-balancing loss on (output_router_logits, coef 0.01: the
    # config class's default), untied, the padding row an id of the parity batch, fp32.
    "olmoe_tiny": dict(
        config=OlmoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, num_experts=6, num_experts_per_tok=3,
            output_router_logits=True, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False),
        dtype=torch.float32, max_shard_size="40KB", pad_from_plain_batch=True),
    # MiniMax-M2: q/k norms across heads, RoPE over half of each 16-wide head, GQA, every layer MoE under the sigmoid
    # router (8 experts, top-2, a random correction bias on the block, renormalised), Mixtral's checkpoint names,
    # untied, fp32.
    "minimax_m2_tiny": dict(
        config=MiniMaxM2Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=64, num_local_experts=8, num_experts_per_tok=2,
            rope_parameters={"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5},
            bos_token_id=1, eos_token_id=2, tie_word_embeddings=False),
        dtype=torch.float32, max_shard_size=None),
    # DeepSeek-V2-Lite's shape: MLA without q_lora_rank (q_proj), YaRN RoPE on interleaved pairs (transformers'
    # complex rotation) with mscale_all_dim, one dense layer then MoE layers under the greedy softmax router (top-3
    # of 8, no renormalisation, scaling 1), 2 shared experts; untied, fp32. The GPU engine runs it.
    "deepseek_v2_tiny": dict(
        config=DeepseekV2Config(**{
            **DEEPSEEK_V3_TINY, "q_lora_rank": None, "topk_method": "greedy", "routed_scaling_factor": 1.0,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1,
                                "mscale": 0.707, "mscale_all_dim": 0.707}}),
        dtype=torch.float32, max_shard_size=None),
    # DeepSeek-V2's router: group_limited_greedy (4 groups of 2 experts scored by their best, the best 2 kept,
    # top-3), weights scaled by 16 (DeepSeek-V2's routed_scaling_factor); q_lora_rank, attention biases, default
    # RoPE, every layer MoE, tied, fp32. The GPU engine refuses this router (the CPU's only, so far).
    "deepseek_v2_grouped": dict(
        config=DeepseekV2Config(**{
            **DEEPSEEK_V3_TINY, "num_hidden_layers": 2, "topk_method": "group_limited_greedy",
            "routed_scaling_factor": 16.0, "first_k_dense_replace": 0, "attention_bias": True,
            "tie_word_embeddings": True, "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}}),
        dtype=torch.float32, max_shard_size=None),
    # OLMo-2: norms on the sublayers' outputs (none on their inputs), q/k norms across heads, attention biases,
    # GQA, untied, fp32.
    "olmo2_tiny": dict(
        config=Olmo2Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, attention_bias=True, max_position_embeddings=64, tie_word_embeddings=False,
            pad_token_id=None, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # OLMo-3: OLMo-2's layers with Olmo3Config's layer types (layers 0-2 sliding over 4 keys, layer 3 full) and RoPE
    # per layer type (YaRN on the full layer, default RoPE at another theta on the sliding ones); tied, fp32.
    "olmo3_tiny": dict(
        config=Olmo3Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, sliding_window=4, max_position_embeddings=64, tie_word_embeddings=True,
            rope_parameters={"full_attention": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                "original_max_position_embeddings": 16},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}},
            pad_token_id=None, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # EXAONE 4.0: OLMo-2's output norms with per-head q/k norms; layers 0-2 slide over 4 keys and rotate, layer 3
    # attends without positions (Exaone4Config's pattern of 4 with a window set); untied, fp32.
    "exaone4_tiny": dict(
        config=Exaone4Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, sliding_window=4, sliding_window_pattern=4, max_position_embeddings=64,
            tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # K-EXAONE (exaone_moe): EXAONE 4.0's attention (layers 0-2 sliding over 4 keys and rotating, layer 3 without
    # positions) in pre-norm layers; a dense first layer then DeepSeek-V3's MoE (4 groups of 2, top-2 groups, top-3,
    # a random correction bias saved on the block, renormalised, scaled by 2.5, one shared expert); untied, fp32.
    "exaone_moe_tiny": dict(
        config=ExaoneMoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, sliding_window=4, sliding_window_pattern=4, moe_intermediate_size=8,
            num_experts=8, n_group=4, topk_group=2, num_experts_per_tok=3, num_shared_experts=1,
            first_k_dense_replace=1, max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=None,
            bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # Solar Open: Llama's attention with q/k/v biases (none on o_proj) and GLM-4-MoE's MoE on every layer (4 groups
    # of 2 experts, top-2 groups, top-3 experts, a random correction bias, renormalised, scaled by 2.5, one shared
    # expert); untied, fp32.
    "solar_open_tiny": dict(
        config=SolarOpenConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, attention_bias=True, moe_intermediate_size=8, n_routed_experts=8, n_group=4, topk_group=2,
            num_experts_per_tok=3, n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5,
            max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # FlexOlmo: OLMo-2's output norms around OLMoE's MoE layer (6 experts, top-2, not renormalised), attention biases,
    # with the load-balancing loss; untied, fp32. The GPU engine refuses it (its MoE block norms no output yet).
    "flex_olmo_tiny": dict(
        config=FlexOlmoConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, attention_bias=True, num_experts=6, num_experts_per_tok=2,
            output_router_logits=True, router_aux_loss_coef=0.01, max_position_embeddings=64,
            tie_word_embeddings=False, pad_token_id=None, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # dots.llm1: Qwen3's attention (per-head q/k norms, biases, layer 2 sliding from max_window_layers with a
    # window of 4 keys) and DeepSeek-V3's MoE (4 groups of 2 experts, top-2 groups, top-3 experts, a random
    # correction bias, renormalised, scaled by 2.5, 2 shared experts) after one dense layer; untied, fp32.
    "dots1_tiny": dict(
        config=Dots1Config(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, attention_bias=True, moe_intermediate_size=8, n_routed_experts=8,
            n_group=4, topk_group=2, num_experts_per_tok=3, n_shared_experts=2, first_k_dense_replace=1,
            norm_topk_prob=True, routed_scaling_factor=2.5, sliding_window=4, max_window_layers=2,
            max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # Gemma 3 (text): norms scaling by 1 + weight around both sublayers, q/k norms, the embedding times sqrt(32),
    # the softmax scale from query_pre_attn_scalar (12, not head_dim 8), layers 0, 1 and 3 sliding over 4 keys
    # (layer_types from sliding_window_pattern 3), RoPE per layer type (linear on the full layer, another theta on
    # the sliding ones), gelu_pytorch_tanh; tied, pad 0, fp32.
    "gemma3_tiny": dict(
        config=Gemma3TextConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=12, sliding_window=4, sliding_window_pattern=3,
            max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1,
            rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0}}),
        architecture="Gemma3ForCausalLM", dtype=torch.float32, max_shard_size=None),
    # Gemma 1: Llama's pre-norm layers with norms scaling by 1 + weight, the embedding times sqrt(32), two kv heads,
    # exact gelu as gemma-7b's config.json names it (biases: the config sweep); tied, pad 0, fp32. Weights of scale
    # 0.25: at 0.5 its norms' 1 + weight and the unnormed q/k saturate the softmax, and transformers' own bf16 run
    # is 0.15-0.21 off its fp32 gradients (tests/reference/bf16_gradient_noise.py), past the GPU test's bound.
    "gemma_tiny": dict(
        config=GemmaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, hidden_act="gelu", max_position_embeddings=64,
            tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None, weight_scale=0.25),
    # ERNIE 4.5's MoE: RoPE on interleaved pairs, a dense first layer, then MoE layers (6 experts, top-2) whose router
    # chooses by softmax + a random moe_statics correction bias and weighs by the softmax, one shared expert; untied,
    # fp32.
    "ernie4_5_moe_tiny": dict(
        config=Ernie4_5_MoeConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, moe_num_experts=6, moe_k=2, moe_intermediate_size=16, moe_num_shared_experts=1,
            moe_layer_start_index=1, max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0,
            bos_token_id=2, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # Granite 3.x MoE with a shared MLP (GraniteMoeShared): 6 stacked experts (top-2, topk-then-softmax router) and the
    # shared MLP beside them on every layer, μP's multipliers (embedding 4, softmax scale 0.25, residual 0.5,
    # logits / 2), attention biases; tied, fp32.
    "granitemoeshared_tiny": dict(
        config=GraniteMoeSharedConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=6, num_experts_per_tok=2, shared_intermediate_size=24,
            attention_bias=True, embedding_multiplier=4.0, attention_multiplier=0.25, residual_multiplier=0.5,
            logits_scaling=2.0, max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=0,
            bos_token_id=2, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
    # Granite 4.0 (GraniteMoeHybrid): Mamba2 (4 heads of 16, 2 B/C groups, state 8, conv 4, chunk 4, the gated norm
    # over the whole width) and NoPE attention layers, each followed by 4 experts (top-2) with the shared MLP
    # beside them; μP's multipliers (embedding 2, softmax scale 0.25, residual 0.5, logits / 1.5: granite-4.0-h's
    # 12 / 0.22 / 6 leave this tiny model's greedy tokens one repeated token); tied, fp32.
    "granitemoehybrid_tiny": dict(
        config=GraniteMoeHybridConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=24,
            mamba_n_heads=4, mamba_n_groups=2, mamba_d_state=8, mamba_chunk_size=4,
            layer_types=["mamba", "attention", "mamba", "attention"], embedding_multiplier=2.0,
            attention_multiplier=0.25, residual_multiplier=0.5, logits_scaling=1.5, max_position_embeddings=64,
            tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1),
        dtype=torch.float32, max_shard_size=None),
}


def make(out_root: Path, name: str, spec: dict) -> None:
    torch.manual_seed(1234)
    config = spec["config"]
    if spec.get("pad_from_plain_batch"):
        # An id the parity batch holds (make_parity.py's seeded plain batch), so the padding row is exercised.
        from make_parity import make_inputs
        config.pad_token_id = int(make_inputs(config.vocab_size)["plain"]["input_ids"][0, 1])
        print(f"{name}: pad_token_id {config.pad_token_id}")
    config.architectures = [spec.get("architecture") or type(config).__name__.replace("Config", "ForCausalLM")]
    model = AutoModelForCausalLM.from_config(config, dtype=spec["dtype"])
    # Random weights far from init so that dtype and layout mistakes show; norms too (they init to ones).
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p, dtype=torch.float32).to(p.dtype) * spec.get("weight_scale", 0.5))
        # DeepSeek-V3's router correction bias is a buffer (zeros at init): random too, so the choice differs
        # from the unbiased scores'.
        for buffer_name, b in model.named_buffers():
            if buffer_name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b, dtype=torch.float32).to(b.dtype) * 0.5)
    folder = out_root / name
    kwargs = {"max_shard_size": spec["max_shard_size"]} if spec["max_shard_size"] else {}
    model.save_pretrained(folder, **kwargs)

    input_ids = torch.tensor([[3, 17, 42, 5, 88, 9, 61, 27]], dtype=torch.int64)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits.float()
    save_file({"input_ids": input_ids, "logits": logits.contiguous()}, folder / "reference.safetensors",
              metadata={"format": "pt"})
    expected = {
        "num_parameters": model.num_parameters(),
        "architecture": config.architectures[0],
        "dtype": str(spec["dtype"]).replace("torch.", ""),
        "made_with": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    print(f"{name}: {expected['num_parameters']} parameters, {len(list(folder.glob('*.safetensors')))} files")


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
    names = sys.argv[2:] or list(FIXTURES)
    unknown = [n for n in names if n not in FIXTURES]
    assert not unknown, f"unknown fixtures {unknown}; known: {list(FIXTURES)}"
    for fixture_name in names:
        make(root, fixture_name, FIXTURES[fixture_name])
