#!/usr/bin/env python3
"""Parameter counts transformers gives NemotronHForCausalLM for Nemotron-H configs, for moetune's config reader
(model/families/nemotron_h_config.h) to match.

nano_30b_a3b.json is Nemotron-3-Nano-30B-A3B's architecture as docs/families/hf-nemotron-h.md and
/work/shared/notes/hf-formats.md quote its published config.json (hidden 2688, 52 blocks, its
hybrid_override_pattern, 64 mamba heads of 64, state 128, 8 groups, 128 experts top-6 of 1856, shared 3712,
32 heads / 2 kv of 128, vocab 131072, untied). latent.json is a small config with every layer kind, the legacy
spellings (mamba_n_groups, num_local_experts, "mamba"/"attention" layer names) and moe_latent_size.
For each, counts.json gets num_parameters() (the e_score_correction_bias buffers are not parameters) and the
layer types transformers derived (the models built on the meta device); latent_saved.json the name and shape of
every tensor save_pretrained writes for the latent config (backbone.* names, one tensor per expert, lm_head
although tie_word_embeddings is true: NemotronHForCausalLM ties nothing).

Run:  /work/refenv/bin/python tests/reference/make_nemotron_h_counts.py tests/fixtures/nemotron_h_configs
"""
import json
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from transformers import NemotronHConfig, NemotronHForCausalLM

NANO = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": 131072,
    "hidden_size": 2688, "num_hidden_layers": 52, "tie_word_embeddings": False,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "max_position_embeddings": 262144,
    "layer_norm_epsilon": 1e-5, "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128,
    "n_groups": 8, "conv_kernel": 4, "chunk_size": 128, "mamba_hidden_act": "silu", "use_conv_bias": True,
    "use_bias": False, "mlp_bias": False, "attention_bias": False, "mlp_hidden_act": "relu2",
    "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856, "n_shared_experts": 1,
    "moe_shared_expert_intermediate_size": 3712, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
    "routed_scaling_factor": 2.5, "intermediate_size": 1856, "time_step_min": 0.001, "time_step_max": 0.1,
    "torch_dtype": "bfloat16",
}
LATENT = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": 96, "hidden_size": 32,
    "layers_block_type": ["mamba", "moe", "attention", "mlp", "moe"], "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24, "mamba_num_heads": 4, "mamba_head_dim": 8,
    "ssm_state_size": 8, "mamba_n_groups": 2, "mamba_d_conv": 3, "num_local_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 12, "moe_shared_expert_intermediate_size": 20, "moe_latent_size": 16, "n_group": 2,
    "topk_group": 1, "use_bias": True, "mlp_bias": True, "tie_word_embeddings": True,
}


def main(out_dir):
    out = Path(out_dir)
    counts = {"versions": {"transformers": transformers.__version__, "torch": torch.__version__}}
    for name, config in (("nano_30b_a3b", NANO), ("latent", LATENT)):
        (out / f"{name}.json").write_text(json.dumps(config, indent=1) + "\n")
        hf = NemotronHConfig.from_json_file(str(out / f"{name}.json"))
        with torch.device("meta"):
            model = NemotronHForCausalLM(hf)
        counts[name] = {"num_parameters": model.num_parameters(), "layer_types": hf.layers_block_type,
                        "n_groups": hf.n_groups, "conv_kernel": hf.conv_kernel, "n_routed_experts": hf.n_routed_experts}
    (out / "counts.json").write_text(json.dumps(counts, indent=1) + "\n")
    with tempfile.TemporaryDirectory() as folder:
        NemotronHForCausalLM(NemotronHConfig.from_json_file(str(out / "latent.json"))).save_pretrained(folder)
        with safe_open(f"{folder}/model.safetensors", "pt") as f:
            saved = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    (out / "latent_saved.json").write_text(json.dumps(saved, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
