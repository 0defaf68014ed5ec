"""Model FLOPs per token for a Qwen3-MoE (or GPT-OSS, DeepSeek-V3, Nemotron-H) config, as DESIGN.md §5 counts them.

6 x (active matmul parameters: attention projections, router, the top-k experts or the dense MLP,
lm_head; the embedding is a lookup, not a matmul) + 6 x n_heads x head_dim x seq per layer for causal
attention (QK^T and PV: 2 matmuls x 2 FLOPs x 3 for forward+backward, halved by the causal mask); a
sliding_attention layer (GPT-OSS) sees about `sliding_window` keys per query instead of seq / 2.
Shared by hf_train.py and report.py so that both sides are divided by the same number.
"""
import json
from pathlib import Path

H200_DENSE_BF16_TFLOPS = 989.0


def _get(config: dict, *names, default=None):
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def is_moe_layer(config: dict, layer: int) -> bool:
    experts = _get(config, "num_experts", "num_local_experts", default=0)
    step = _get(config, "decoder_sparse_step", default=1)
    return experts > 0 and layer not in (config.get("mlp_only_layers") or []) and (layer + 1) % step == 0


def deepseek_v3_flops_per_token(config: dict, seq: int) -> dict:
    """DeepSeek-V3's family: latent attention's projections, (top-k + shared) experts, dense first layers;
    attention scores with q/k's head dim for QK^T and v's for PV. GLM-4-MoE: the same MoE layers under GQA."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    if config.get("model_type") == "glm4_moe":
        head_dim = _get(config, "head_dim", default=hidden // heads)
        kv_heads = _get(config, "num_key_value_heads", default=heads)
        nope, rope, dv = head_dim, 0, head_dim  # the scores count q/k's whole head (partial RoPE changes no FLOPs)
        attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o + k, v
    else:
        nope, rope, dv = config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]
        q_rank, kv_rank = config.get("q_lora_rank"), config["kv_lora_rank"]
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        attention = q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + dv) + heads * dv * hidden
    active = 0
    layer_types = config.get("mlp_layer_types")  # GLM-4-MoE-Lite: "dense" / "sparse" a layer
    for layer in range(config["num_hidden_layers"]):
        active += attention
        if layer_types[layer] == "sparse" if layer_types else layer >= config.get("first_k_dense_replace", 0):
            experts = config["num_experts_per_tok"] + config.get("n_shared_experts", 0)
            active += hidden * config["n_routed_experts"] + experts * 3 * hidden * config["moe_intermediate_size"]
        else:
            active += 3 * hidden * config["intermediate_size"]
    active += hidden * config["vocab_size"]
    attention_scores = 3 * heads * (nope + rope + dv) * seq * config["num_hidden_layers"]
    return {"active_matmul_params": active, "flops_per_token": 6 * active + attention_scores}


# Nemotron-H's layer kinds: hybrid_override_pattern's letters and layers_block_type's names (old and new spellings).
NEMOTRON_H_KINDS = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp", "linear_attention": "mamba",
                    "full_attention": "attention", "mamba": "mamba", "moe": "moe", "attention": "attention", "mlp": "mlp"}


def nemotron_h_layer_kinds(config: dict) -> list:
    """transformers 5.17 saves layers_block_type and no num_hidden_layers (it is the list's length)."""
    kinds = config.get("layers_block_type") or list(config["hybrid_override_pattern"])
    return [NEMOTRON_H_KINDS[k] for k in kinds][:config.get("num_hidden_layers") or len(kinds)]


def nemotron_h_flops_per_token(config: dict, seq: int) -> dict:
    """Nemotron-H: Mamba2 layers count their in_proj and out_proj (the scan, the conv and the gated norm are not
    matmuls with parameters, as moetune counts them too); attention without RoPE; relu² experts (two matrices,
    no gate) in the latent width when moe_latent_size is set, a relu² shared expert; relu² MLPs."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = _get(config, "head_dim", default=hidden // heads)
    kv_heads = _get(config, "num_key_value_heads", default=heads)
    inner = config["mamba_num_heads"] * config["mamba_head_dim"]
    state, groups = config["ssm_state_size"], _get(config, "n_groups", "mamba_n_groups", default=1)
    projection = inner + (inner + 2 * groups * state) + config["mamba_num_heads"]
    width = config.get("moe_latent_size") or hidden
    experts = _get(config, "n_routed_experts", "num_local_experts")
    per_kind = {
        "mamba": hidden * projection + inner * hidden,
        "attention": hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2,
        "mlp": 2 * hidden * config["intermediate_size"],
        "moe": hidden * experts + config["num_experts_per_tok"] * 2 * width * config["moe_intermediate_size"]
               + 2 * hidden * config["moe_shared_expert_intermediate_size"]
               + (2 * hidden * width if config.get("moe_latent_size") else 0),
    }
    kinds = nemotron_h_layer_kinds(config)
    active = sum(per_kind[k] for k in kinds) + hidden * config["vocab_size"]
    attention_scores = 6 * heads * head_dim * seq * kinds.count("attention")
    return {"active_matmul_params": active, "flops_per_token": 6 * active + attention_scores}


def qwen3_next_flops_per_token(config: dict, seq: int) -> dict:
    """Qwen3-Next: Gated DeltaNet layers count in_proj (q, k, v, z, b, a) and out_proj (the conv, the rule's state
    products and the gated norm are not matmuls with parameters, as for Nemotron-H's Mamba2); gated attention's
    q_proj is twice as wide (a gate per query); Qwen2-MoE's experts with a gated shared expert. Layer kinds from
    layer_types, else every full_attention_interval-th layer attention."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = _get(config, "head_dim", default=hidden // heads)
    kv_heads = _get(config, "num_key_value_heads", default=heads)
    layers = config["num_hidden_layers"]
    interval = config.get("full_attention_interval", 4)
    kinds = config.get("layer_types") or ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                                          for i in range(layers)]
    key_dim = config["linear_num_key_heads"] * config["linear_key_head_dim"]
    value_dim = config["linear_num_value_heads"] * config["linear_value_head_dim"]
    delta = hidden * (2 * key_dim + 2 * value_dim + 2 * config["linear_num_value_heads"]) + value_dim * hidden
    attention = hidden * heads * head_dim * 3 + hidden * kv_heads * head_dim * 2  # q and its gate, o + k, v
    active = 0
    for layer in range(layers):
        active += attention if kinds[layer] == "full_attention" else delta
        if is_moe_layer(config, layer):
            active += (hidden * config["num_experts"] + config["num_experts_per_tok"] * 3 * hidden *
                       config["moe_intermediate_size"] + 3 * hidden * config["shared_expert_intermediate_size"] + hidden)
        else:
            active += 3 * hidden * config["intermediate_size"]
    active += hidden * config["vocab_size"]
    attention_scores = 6 * heads * head_dim * seq * kinds[:layers].count("full_attention")
    return {"active_matmul_params": active, "flops_per_token": 6 * active + attention_scores}


def flops_per_token(config: dict, seq: int) -> dict:
    if config.get("model_type") in ("deepseek_v3", "glm4_moe", "glm4_moe_lite"):
        return deepseek_v3_flops_per_token(config, seq)
    if config.get("model_type") == "nemotron_h":
        return nemotron_h_flops_per_token(config, seq)
    if config.get("model_type") == "qwen3_next":
        return qwen3_next_flops_per_token(config, seq)
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = _get(config, "num_key_value_heads", default=heads)
    head_dim = _get(config, "head_dim", default=hidden // heads)
    experts = _get(config, "num_experts", "num_local_experts", default=0)
    top_k = _get(config, "num_experts_per_tok", default=0)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o + k, v
    active = 0
    for layer in range(config["num_hidden_layers"]):
        active += attention
        if is_moe_layer(config, layer):
            inner = _get(config, "moe_intermediate_size", "intermediate_size")
            active += hidden * experts + top_k * 3 * hidden * inner
        else:
            active += 3 * hidden * config["intermediate_size"]
    active += hidden * config["vocab_size"]  # lm_head (tied or not, it is a matmul)
    layer_types = config.get("layer_types") or ["full_attention"] * config["num_hidden_layers"]
    window = config.get("sliding_window") or seq
    attention_scores = sum(6 * heads * head_dim * (min(seq, 2 * window) if kind == "sliding_attention" else seq)
                           for kind in layer_types[:config["num_hidden_layers"]])
    return {"active_matmul_params": active, "flops_per_token": 6 * active + attention_scores}


def flops_per_token_from_folder(model_dir, seq: int) -> dict:
    return flops_per_token(json.loads((Path(model_dir) / "config.json").read_text()), seq)


def throughput(tokens_per_second: float, flops_per_token_value: float) -> dict:
    tflops = tokens_per_second * flops_per_token_value / 1e12
    return {"model_tflops": tflops, "mfu": tflops / H200_DENSE_BF16_TFLOPS}
