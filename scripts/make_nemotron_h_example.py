#!/usr/bin/env python3
"""Makes the model of examples/tiny-nemotron-h.yaml: a tiny Nemotron-H (NemotronHForCausalLM, random weights) with
every layer kind (Mamba2, latent MoE, attention, relu² MLP), sized for the CPU, and the embedded default's tokenizer
and chat template (assets/default/model), so it learns the default task (assets/default/train.jsonl).

Written to assets/nemotron_h_tiny/model; deterministic. Run after scripts/make_default_assets.py:
    /work/refenv/bin/python scripts/make_nemotron_h_example.py   (torch, transformers 5)
"""
import json
import shutil
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, NemotronHConfig

ROOT = Path(__file__).resolve().parent.parent / "assets"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]


def main():
    source = ROOT / "default" / "model"
    model_dir = ROOT / "nemotron_h_tiny" / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, model_dir / name)
    default = json.loads((source / "config.json").read_text())

    torch.manual_seed(20261201)
    config = NemotronHConfig(
        vocab_size=default["vocab_size"], hidden_size=64, layer_norm_epsilon=1e-5,
        layers_block_type=["linear_attention", "moe", "full_attention", "mlp", "linear_attention", "moe"],
        mamba_num_heads=4, mamba_head_dim=16, n_groups=2, ssm_state_size=16, conv_kernel=4, chunk_size=16,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, moe_shared_expert_intermediate_size=64,
        n_group=1, topk_group=1, routed_scaling_factor=1.0, moe_latent_size=32, mlp_bias=False,
        max_position_embeddings=128, tie_word_embeddings=False, use_cache=False,
        bos_token_id=None, eos_token_id=default["eos_token_id"], pad_token_id=default["pad_token_id"])
    config.architectures = ["NemotronHForCausalLM"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(model_dir)
    (model_dir / "expected.json").write_text(json.dumps({
        "num_parameters": model.num_parameters(),
        "made_with": {"torch": torch.__version__, "transformers": transformers.__version__}}, indent=2) + "\n")
    print(f"{model_dir}: {model.num_parameters()} parameters")


if __name__ == "__main__":
    main()
