#!/usr/bin/env python3
"""Builds the benchmark's reference model: the Qwen3-30B-A3B architecture (or, with --family, gpt-oss-20b's,
Moonlight-16B-A3B's, DeepSeek-V3's, GLM-4.5-Air's or Nemotron-3-Nano-30B-A3B's) cut to N layers, random weights.

    python3 bench/make_reference_model.py OUT_DIR [--family qwen3_moe|gpt_oss|moonlight|deepseek_v3|glm4_5_air|glm4_7_flash|nemotron_h|qwen3_next]
                                          [--layers 4] [--skew none|hot] [--tiny] [--seed 1234]

--family moonlight / deepseek_v3: Moonlight-16B-A3B's or DeepSeek-V3's widths (the DeepSeek-V3 family: latent
attention, the sigmoid group-limited router, shared experts), cut to N layers of which the first is dense.

--family glm4_5_air: GLM-4.5-Air's config.json (GLM-4-MoE: hidden 4096, 96 heads / 8 kv of 128 with q/k/v biases and
RoPE on half of each head, 128 experts top-8 of 1408 and a shared one, DeepSeek-V3's router; vocab 151552), cut to
N layers of which the first is dense.

--family nemotron_h: Nemotron-3-Nano-30B-A3B's published config.json (as tests/fixtures/nemotron_h_configs/
nano_30b_a3b.json and /work/shared/notes/hf-formats.md quote it: hidden 2688, Mamba2 64 heads of 64, state 128,
8 groups; 128 relu² experts top-6 of 1856, a shared expert of 3712; attention 32 heads / 2 kv of 128 without
RoPE; vocab 131072) with the first N letters of its layer pattern "MEMEM*EM..." (8 layers: 4 Mamba2, 3 MoE,
1 attention). Its routing is not measured (the router returns logits only).

--family qwen3_next: Qwen3-Next-80B-A3B's widths (hidden 2048; Gated DeltaNet layers of 16 key heads and 32 value
heads of 128, conv 4; gated attention of 16 heads / 2 kv of 256 with RoPE on a quarter of each head; 512 experts
top-10 of 512 and a gated shared expert of 512; vocab 151936), cut to N layers in its pattern (three Gated DeltaNet
layers, then one attention layer); --tiny: the same pattern at small widths (the harness's CPU run).

Weights are drawn with transformers' own initialisation (initializer_range 0.02) from a fixed seed, on the
GPU when there is one (seconds instead of minutes), and saved in bf16 with save_pretrained.

--skew hot keeps the router function and changes only router weights: in each MoE layer the rows of a few
"hot" experts (16 of 128) are scaled up, which widens the spread of their logits, so they win the top-k
more often. The scale is calibrated per layer, layer after layer, on the hidden states that random tokens
actually produce there, until the hot experts take --hot-share (0.5) of the top-k choices. The routing
that results is then measured on fresh random tokens and printed (and saved as bench_routing.json).
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, DeepseekV3Config, Glm4MoeConfig, GptOssConfig, NemotronHConfig, Qwen3MoeConfig
from transformers import Glm4MoeLiteConfig, Qwen3NextConfig


def reference_config(layers: int, tiny: bool) -> Qwen3MoeConfig:
    # Tiny keeps the reference's experts / top-k ratio (16), so the skew behaves alike.
    if tiny:  # same structure, small enough for a CPU
        sizes = dict(vocab_size=1024, hidden_size=64, intermediate_size=192, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, num_experts=32, num_experts_per_tok=2,
                     moe_intermediate_size=32, max_position_embeddings=4096)
    else:
        sizes = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_attention_heads=32,
                     num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                     moe_intermediate_size=768, max_position_embeddings=40960)
    config = Qwen3MoeConfig(
        num_hidden_layers=layers, tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        rms_norm_eps=1e-6, norm_topk_prob=True, output_router_logits=True, router_aux_loss_coef=0.001,
        initializer_range=0.02, decoder_sparse_step=1, mlp_only_layers=[], hidden_act="silu",
        bos_token_id=151643 if not tiny else None, eos_token_id=151645 if not tiny else None, **sizes)
    config.architectures = ["Qwen3MoeForCausalLM"]
    return config


def deepseek_config(family: str, layers: int):
    """Moonlight-16B-A3B's or DeepSeek-V3's published config, with `layers` layers of which the first is dense."""
    common = dict(num_hidden_layers=layers, first_k_dense_replace=1, tie_word_embeddings=False, initializer_range=0.02,
                  norm_topk_prob=True, hidden_act="silu", qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                  kv_lora_rank=512, rope_interleave=True, attention_bias=False)
    if family == "moonlight":
        config = DeepseekV3Config(
            vocab_size=163840, hidden_size=2048, intermediate_size=11264, moe_intermediate_size=1408,
            num_attention_heads=16, num_key_value_heads=16, n_routed_experts=64, n_shared_experts=2,
            num_experts_per_tok=6, n_group=1, topk_group=1, q_lora_rank=None, routed_scaling_factor=2.446,
            rms_norm_eps=1e-5, max_position_embeddings=8192, bos_token_id=163584, eos_token_id=163585,
            rope_parameters={"rope_type": "default", "rope_theta": 50000.0}, **common)
    else:
        config = DeepseekV3Config(
            vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
            num_attention_heads=128, num_key_value_heads=128, n_routed_experts=256, n_shared_experts=1,
            num_experts_per_tok=8, n_group=8, topk_group=4, q_lora_rank=1536, routed_scaling_factor=2.5,
            rms_norm_eps=1e-6, max_position_embeddings=163840, bos_token_id=0, eos_token_id=1,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                             "original_max_position_embeddings": 4096}, **common)
    config.architectures = ["DeepseekV3ForCausalLM"]
    return config


def glm4_5_air_config(layers: int) -> Glm4MoeConfig:
    """GLM-4.5-Air's published config.json with `layers` layers of which the first is dense."""
    config = Glm4MoeConfig(
        vocab_size=151552, hidden_size=4096, intermediate_size=10944, moe_intermediate_size=1408, num_hidden_layers=layers,
        num_attention_heads=96, num_key_value_heads=8, head_dim=128, attention_bias=True, use_qk_norm=False,
        n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8, n_group=1, topk_group=1, first_k_dense_replace=1,
        norm_topk_prob=True, routed_scaling_factor=1.0, rms_norm_eps=1e-5, max_position_embeddings=131072,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
        tie_word_embeddings=False, initializer_range=0.02, hidden_act="silu", pad_token_id=151329,
        eos_token_id=[151329, 151336, 151338])
    config.architectures = ["Glm4MoeForCausalLM"]
    return config


def glm4_7_flash_config(layers: int) -> Glm4MoeLiteConfig:
    """GLM-4.7-Flash's widths (Glm4MoeLiteConfig's defaults: latent attention with 20 heads of q/k 192 + 64 and v 256,
    q_lora_rank 768, kv_lora_rank 512; 64 experts top-4 of 1536 and a shared one; vocab 154880; rope_theta 1e6) with
    `layers` layers of which the first is dense."""
    config = Glm4MoeLiteConfig(
        num_hidden_layers=layers, mlp_layer_types=["dense"] + ["sparse"] * (layers - 1), tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}, initializer_range=0.02)
    config.architectures = ["Glm4MoeLiteForCausalLM"]
    return config


def gpt_oss_config(layers: int, tiny: bool) -> GptOssConfig:
    """openai/gpt-oss-20b's config.json (32 experts top-4, sliding window 128 on every other layer, YaRN x32)."""
    if tiny:
        sizes = dict(vocab_size=1024, hidden_size=64, intermediate_size=64, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2, sliding_window=16)
    else:
        sizes = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_attention_heads=64,
                     num_key_value_heads=8, head_dim=64, num_local_experts=32, num_experts_per_tok=4,
                     sliding_window=128)
    config = GptOssConfig(
        num_hidden_layers=layers, tie_word_embeddings=False, attention_bias=True, max_position_embeddings=131072,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False},
        rms_norm_eps=1e-5, output_router_logits=True, router_aux_loss_coef=0.9, swiglu_limit=7.0,
        initializer_range=0.02, hidden_act="silu", eos_token_id=None if tiny else 200002,
        pad_token_id=None if tiny else 199999, **sizes)
    config.architectures = ["GptOssForCausalLM"]
    return config


NEMOTRON_3_NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


def nemotron_h_config(layers: int, tiny: bool) -> NemotronHConfig:
    """Nemotron-3-Nano-30B-A3B's config.json with its first `layers` layers (tiny: the same pattern, small widths)."""
    if layers > len(NEMOTRON_3_NANO_PATTERN):
        raise SystemExit(f"--family nemotron_h has {len(NEMOTRON_3_NANO_PATTERN)} layers at most")
    if tiny:
        sizes = dict(vocab_size=1024, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                     mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=2, chunk_size=64,
                     n_routed_experts=32, num_experts_per_tok=2, moe_intermediate_size=32,
                     moe_shared_expert_intermediate_size=64, intermediate_size=32)
    else:
        sizes = dict(vocab_size=131072, hidden_size=2688, num_attention_heads=32, num_key_value_heads=2, head_dim=128,
                     mamba_num_heads=64, mamba_head_dim=64, ssm_state_size=128, n_groups=8, chunk_size=128,
                     n_routed_experts=128, num_experts_per_tok=6, moe_intermediate_size=1856,
                     moe_shared_expert_intermediate_size=3712, intermediate_size=1856)
    config = NemotronHConfig(
        num_hidden_layers=layers, hybrid_override_pattern=NEMOTRON_3_NANO_PATTERN[:layers], tie_word_embeddings=False,
        max_position_embeddings=262144, layer_norm_epsilon=1e-5, conv_kernel=4, mamba_hidden_act="silu",
        use_conv_bias=True, use_bias=False, mlp_bias=False, attention_bias=False, mlp_hidden_act="relu2",
        n_shared_experts=1, n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
        time_step_min=0.001, time_step_max=0.1, initializer_range=0.02, use_cache=False, **sizes)
    config.architectures = ["NemotronHForCausalLM"]
    return config


def qwen3_next_config(layers: int, tiny: bool) -> Qwen3NextConfig:
    """Qwen3-Next-80B-A3B's widths with `layers` layers (every 4th full attention, the rest Gated DeltaNet; tiny: the
    same pattern, small widths, for the harness's CPU run)."""
    if tiny:
        sizes = dict(vocab_size=1024, hidden_size=64, intermediate_size=64, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_key_head_dim=16,
                     linear_num_value_heads=4, linear_value_head_dim=16, num_experts=32, num_experts_per_tok=2,
                     moe_intermediate_size=32, shared_expert_intermediate_size=32)
    else:
        sizes = dict(vocab_size=151936, hidden_size=2048, intermediate_size=5120, num_attention_heads=16,
                     num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128,
                     linear_num_value_heads=32, linear_value_head_dim=128, num_experts=512, num_experts_per_tok=10,
                     moe_intermediate_size=512, shared_expert_intermediate_size=512)
    config = Qwen3NextConfig(
        num_hidden_layers=layers, linear_conv_kernel_dim=4, full_attention_interval=4,
        decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, router_aux_loss_coef=0.001,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        rms_norm_eps=1e-6, max_position_embeddings=262144, tie_word_embeddings=False, initializer_range=0.02,
        hidden_act="silu", **sizes)
    config.architectures = ["Qwen3NextForCausalLM"]
    return config


def router_of(block):
    """The MoE router module of a decoder layer (Qwen3-MoE's and DeepSeek-V3's mlp.gate, GPT-OSS's mlp.router), or
    None."""
    return getattr(block.mlp, "gate", None) or getattr(block.mlp, "router", None)


def num_experts_of(config) -> int:
    return (getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
            or config.n_routed_experts)


class _Captured(Exception):
    """Raised by a hook to stop the forward once the router input it wants is in hand."""


def router_input(model, layer: int, input_ids: torch.Tensor) -> torch.Tensor:
    captured = {}

    def hook(_module, args):
        captured["x"] = args[0].reshape(-1, args[0].shape[-1]).detach()
        raise _Captured

    handle = router_of(model.model.layers[layer]).register_forward_pre_hook(hook)
    try:
        model(input_ids=input_ids, use_cache=False)
    except _Captured:
        pass
    finally:
        handle.remove()
    return captured["x"]


def hot_share(x: torch.Tensor, weight: torch.Tensor, hot: torch.Tensor, top_k: int) -> float:
    chosen = torch.topk(x @ weight.T, top_k, dim=-1).indices  # softmax is monotone: top-k of logits = of probs
    return torch.isin(chosen, hot).float().mean().item()


def calibrate_scale(x: torch.Tensor, weight: torch.Tensor, hot: torch.Tensor, top_k: int, target: float) -> float:
    """Bisection on the factor applied to the hot rows; the hot share grows with it."""
    x32, w32 = x.float(), weight.float()

    def share(scale: float) -> float:
        w = w32.clone()
        w[hot] *= scale
        return hot_share(x32, w, hot, top_k)

    low, high = 1.0, 2.0
    while share(high) < target and high < 1024:
        low, high = high, high * 2
    for _ in range(30):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if share(middle) < target else (low, middle)
    scale = 0.5 * (low + high)
    reached = share(scale)
    if abs(reached - target) > 0.02:
        # A bias-free router can only widen the hot logits' spread, so a hot expert wins for at most about half
        # of the tokens: the share tops out near hot_experts / (2 top_k).
        print(f"warning: hot share reached {reached:.1%}, not {target:.1%}", flush=True)
    return scale


def measure_routing(model, input_ids: torch.Tensor, hot_by_layer: dict) -> list:
    """Per MoE layer: load max/mean over experts and the share of choices the hot experts got, from the real router."""
    records, handles = [], []
    num_experts = num_experts_of(model.config)

    def make_hook(layer):
        def hook(_module, _args, output):
            indices = output[2].reshape(-1)
            load = torch.bincount(indices, minlength=num_experts).float()
            record = {"layer": layer, "load_max_over_mean": (load.max() / load.mean()).item(),
                      "load_min_over_mean": (load.min() / load.mean()).item()}
            if layer in hot_by_layer:
                record["hot_share"] = torch.isin(indices, hot_by_layer[layer]).float().mean().item()
            records.append(record)
        return hook

    for layer, block in enumerate(model.model.layers):
        if router_of(block) is not None:
            handles.append(router_of(block).register_forward_hook(make_hook(layer)))
    try:
        model(input_ids=input_ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--family", choices=["qwen3_moe", "gpt_oss", "moonlight", "deepseek_v3", "glm4_5_air", "glm4_7_flash",
                                             "nemotron_h", "qwen3_next"],
                        default="qwen3_moe")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--skew", choices=["none", "hot"], default="none")
    parser.add_argument("--tiny", action="store_true", help="hidden 64, 32 experts top-2, vocab 1024: for CPU tests")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--hot-experts", type=int, default=None, help="default: an eighth of the experts (16 of 128)")
    parser.add_argument("--hot-share", type=float, default=0.5, help="share of top-k choices the hot experts should get")
    parser.add_argument("--calibration-tokens", type=int, default=8192)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    if args.family in ("moonlight", "deepseek_v3"):
        if args.tiny or args.skew != "none":
            raise SystemExit("--family moonlight / deepseek_v3 take neither --tiny nor --skew")
        config = deepseek_config(args.family, args.layers)
    elif args.family == "glm4_5_air":
        if args.tiny or args.skew != "none":
            raise SystemExit("--family glm4_5_air takes neither --tiny nor --skew")
        config = glm4_5_air_config(args.layers)
    elif args.family == "glm4_7_flash":
        if args.tiny or args.skew != "none":
            raise SystemExit("--family glm4_7_flash takes neither --tiny nor --skew")
        config = glm4_7_flash_config(args.layers)
    elif args.family in ("nemotron_h", "qwen3_next"):
        if args.skew != "none":
            raise SystemExit(f"--family {args.family} takes no --skew")
        config = (nemotron_h_config if args.family == "nemotron_h" else qwen3_next_config)(args.layers, args.tiny)
    else:
        config = (gpt_oss_config if args.family == "gpt_oss" else reference_config)(args.layers, args.tiny)
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"built {params / 1e9:.3f} B parameters ({args.layers} layers) on {args.device}", flush=True)

    generator = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    tokens = max(args.calibration_tokens, 64)
    seq = min(4096, tokens)

    def random_ids():
        ids = torch.randint(0, config.vocab_size, (tokens // seq, seq), generator=generator)
        return ids.to(args.device)

    hot_by_layer, scales = {}, {}
    with torch.no_grad():
        if args.skew == "hot":
            if args.family != "qwen3_moe":
                raise SystemExit("--skew hot is calibrated for Qwen3-MoE's bias-free router only")
            count = args.hot_experts or max(1, config.num_experts // 8)
            if not 0 < count < config.num_experts:
                raise SystemExit(f"--hot-experts must be in (0, {config.num_experts})")
            if not count / config.num_experts < args.hot_share < 1:
                raise SystemExit(f"--hot-share must be above the uniform share {count / config.num_experts:.3f} and below 1")
            calibration_ids = random_ids()
            for layer, block in enumerate(model.model.layers):
                if not hasattr(block.mlp, "gate"):
                    continue
                hot = torch.randperm(config.num_experts, generator=generator)[:count].sort().values.to(args.device)
                x = router_input(model, layer, calibration_ids)  # layers before this one are already skewed
                scale = calibrate_scale(x, block.mlp.gate.weight, hot, config.num_experts_per_tok, args.hot_share)
                weight = block.mlp.gate.weight.float()
                weight[hot] *= scale
                block.mlp.gate.weight.copy_(weight.to(block.mlp.gate.weight.dtype))
                hot_by_layer[layer], scales[layer] = hot, scale
        routing = [] if args.family == "nemotron_h" else measure_routing(model, random_ids(), hot_by_layer)

    for record in routing:
        layer = record["layer"]
        extra = ""
        if layer in hot_by_layer:
            extra = f" | hot experts {hot_by_layer[layer].tolist()} x{scales[layer]:.3f} -> {record['hot_share']:.1%} of choices"
        print(f"layer {layer}: expert load max/mean {record['load_max_over_mean']:.2f}, "
              f"min/mean {record['load_min_over_mean']:.2f}{extra}")
    worst = max((r["load_max_over_mean"] for r in routing), default=float("nan"))
    print(f"expert load max/mean (worst layer, fresh random tokens): {worst:.2f}")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out_dir)
    summary = {"family": args.family, "skew": args.skew, "seed": args.seed, "layers": args.layers, "tiny": args.tiny, "parameters": params,
               "hot_share_target": args.hot_share if args.skew == "hot" else None,
               "hot_experts": {str(k): v.tolist() for k, v in hot_by_layer.items()},
               "router_scale": {str(k): v for k, v in scales.items()}, "routing": routing,
               "torch": torch.__version__, "transformers": transformers.__version__}
    (args.out_dir / "bench_routing.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"saved {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
