#!/usr/bin/env python3
"""The MoE layer's own speed, from a profiled moetune run (training.profile: true writes profile.json).

usage: moe_layer_tflops.py PROFILE_JSON MODEL_DIR TOKENS_PER_STEP

Sums the moe.* phases (router, dispatch, experts, combine and their backward passes; the ep.* phases nest inside
them) per MoE layer and divides the layer's model FLOPs by that time: the router GEMM and the experts' three
GEMMs per chosen expert (and per shared expert, over every token), forward (2·m·n·k) and backward (twice that),
at the step's token count. Real routing, in the real job: each layer sees the tokens the layer below produced.
"""
import json
import sys


def main():
    profile_path, model_dir, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    profile = json.load(open(profile_path))
    config = json.load(open(f"{model_dir}/config.json"))
    hidden = config["hidden_size"]
    inner = config["moe_intermediate_size"]
    experts = config.get("num_experts", config.get("num_local_experts", config.get("n_routed_experts")))
    top_k = config["num_experts_per_tok"]
    shared = config.get("n_shared_experts") or 0  # DeepSeek-V3's shared experts, each as wide as a routed one
    step = config.get("decoder_sparse_step", 1) or 1
    skip = set(config.get("mlp_only_layers", [])) | set(range(config.get("first_k_dense_replace", 0)))
    moe_layers = sum(1 for layer in range(config["num_hidden_layers"]) if layer not in skip and (layer + 1) % step == 0)
    milliseconds = sum(p["ms_per_step"] for p in profile["phases"] if p["phase"].startswith("moe."))
    per_layer_ms = milliseconds / moe_layers
    forward = 2 * tokens * hidden * experts + 2 * tokens * (top_k + shared) * 3 * hidden * inner
    flops = 3 * forward  # forward + backward (twice the forward's GEMM work)
    with_shared = f" + {shared} shared" if shared else ""
    print(f"MoE layer ({experts} experts, top-{top_k}{with_shared}, hidden {hidden}, expert width {inner}), {tokens} "
          f"tokens, forward + backward: {per_layer_ms:.3f} ms, {flops / per_layer_ms / 1e9:.0f} TFLOP/s "
          f"(mean over {moe_layers} layers of the profiled run)")


if __name__ == "__main__":
    main()
