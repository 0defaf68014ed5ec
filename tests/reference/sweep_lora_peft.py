#!/usr/bin/env python3
"""LoRA adapters moetune trains, loaded by PEFT: for each case, two CPU training steps of `moetune finetune` with
LoRA on a fixture, `moetune merge`, then check_lora_adapter.py (PEFT loads the adapter with no missing or
unexpected keys, and its merge_and_unload equals moetune's merge, logits and every weight, at 1e-5; the bf16
fixtures' storage rounding aside, so the cases use fp32 fixtures).

Found with it in session 26: PEFT 0.21 moves DeepSeek-V3's gate_proj / up_proj / down_proj adapters onto the fused
experts (now refused and left out of all-linear there); GPT-OSS's expert adapters. Run:
  /work/refenv/bin/python tests/reference/sweep_lora_peft.py build/src/moetune/moetune tests/fixtures [case ...]
"""
import subprocess
import sys
import tempfile
from pathlib import Path

EXPERTS = "lora.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]"
CASES = [
    ("llama_tiny", ["lora.target_modules=all-linear"]),
    ("qwen3_f32", ["lora.target_modules=all-linear"]),
    ("qwen2_moe_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("qwen3_moe_tied_f32", ["lora.target_modules=all-linear", EXPERTS, "lora.modules_to_save=[gate]"]),
    ("mixtral_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("deepseek_v3_tiny", ["lora.target_modules=all-linear"]),
    ("deepseek_v3_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("deepseek_v3_qproj_tied", ["lora.target_modules=all-linear", EXPERTS]),
    ("gpt_oss_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("gpt_oss_tiny", ["lora.target_modules=[q_proj]", EXPERTS, "lora.quantize=nf4"]),
    ("nemotron_h_tiny", ["lora.target_modules=[q_proj,k_proj,v_proj,o_proj,up_proj,down_proj]"]),
    # Qwen3-Next: the gated q_proj's LoRA B rows (per head query then gate on disk) and in_proj_qkvz's / in_proj_ba's
    # (per key head) in the engine's order.
    ("qwen3_next_tiny", ["lora.target_modules=[q_proj,k_proj,v_proj,o_proj]", EXPERTS]),
    ("qwen3_next_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("@qwen3_5", ["lora.target_modules=[in_proj_qkv,in_proj_z,out_proj]", "lora.dropout=0.1"]),
    ("glm4_moe_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("glm4_moe_quarter_tied", ["lora.target_modules=[q_proj,k_proj]"]),
    ("glm4_moe_lite_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("phi3_tiny", ["lora.target_modules=all-linear"]),
    ("phi3_tiny", ["lora.target_modules=[qkv_proj]"]),
    ("smollm3_tiny", ["lora.target_modules=all-linear"]),
    ("olmoe_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("minimax_m2_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("deepseek_v2_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("deepseek_v2_grouped", ["lora.target_modules=[q_a_proj,kv_b_proj]", EXPERTS]),
    ("dots1_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("olmo2_tiny", ["lora.target_modules=all-linear"]),
    ("olmo3_tiny", ["lora.target_modules=[q_proj,v_proj,down_proj]"]),
    ("exaone4_tiny", ["lora.target_modules=all-linear"]),
    ("solar_open_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("flex_olmo_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("exaone_moe_tiny", ["lora.target_modules=all-linear", EXPERTS]),
    ("gemma3_tiny", ["lora.target_modules=all-linear"]),
    ("gemma_tiny", ["lora.target_modules=[q_proj,v_proj,gate_proj]"]),
    # Made here (no committed fixture): Gemma 3's vision-language wrapper, whose vision tower has q_proj / k_proj
    # too; moetune adapts the language model's only, under the names PEFT gives them (model.language_model.*).
    ("@gemma3_vl", ["lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj]"]),
    # ERNIE 4.5 (made here too): q/k rows reordered from interleaved RoPE pairs, LoRA B's with them; PEFT converts
    # its MoE MLP names as qwen2_moe's.
    ("@ernie4_5_moe", ["lora.target_modules=all-linear", EXPERTS]),
    ("@ernie4_5", ["lora.target_modules=[q_proj,k_proj,down_proj]"]),
    ("@arcee", ["lora.target_modules=all-linear"]),  # its ungated relu² MLP: up_proj and down_proj
    # Granite: the multipliers around every adapted projection; GraniteMoeShared's stacked experts (their v5
    # in-memory names are PEFT's target_parameters) and its shared MLP's input_linear / output_linear.
    ("@granite", ["lora.target_modules=all-linear"]),
    ("@granitemoeshared", ["lora.target_modules=all-linear",
                           "lora.target_parameters=[block_sparse_moe.experts.gate_up_proj,block_sparse_moe.experts.down_proj]"]),
    ("@granitemoe_swa", ["lora.target_modules=all-linear",
                         "lora.target_parameters=[block_sparse_moe.experts.gate_up_proj,block_sparse_moe.experts.down_proj]"]),
    ("@glm4", ["lora.target_modules=all-linear"]),  # q/k rows reordered from interleaved pairs; one gate_up_proj
    # Granite 4.0's hybrid: Mamba2 layers (their projections take no adapter, as Nemotron-H's) beside attention.
    ("@granitemoehybrid", ["lora.target_modules=[q_proj,v_proj,o_proj,input_linear,output_linear]",
                           "lora.target_parameters=[block_sparse_moe.experts.gate_up_proj]"]),
    # Qwen3.5 (made here): the gated q_proj's B rows; the dense MLPs (Qwen3.5) and the experts (Qwen3.5-MoE).
    ("@qwen3_5", ["lora.target_modules=[q_proj,k_proj,o_proj,gate_proj,up_proj,down_proj]"]),
    ("@qwen3_5", ["lora.target_modules=all-linear"]),
    ("@qwen3_5_moe", ["lora.target_modules=[q_proj,v_proj]", EXPERTS]),
    ("@qwen3_5_moe", ["lora.target_modules=[gate_proj,down_proj]"]),
]


def make_gemma3_vl(folder: Path) -> Path:
    """A random fp32 Gemma3ForConditionalGeneration (one-layer vision tower), saved as transformers saves it."""
    import torch
    from transformers import AutoConfig
    torch.manual_seed(0)
    text = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, sliding_window=8, max_position_embeddings=256)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    config = AutoConfig.for_model("gemma3", text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                  image_token_index=95, boi_token_index=93, eoi_token_index=94)
    return save_random(config, folder)


def save_random(config, folder: Path) -> Path:
    """The model of `config` in fp32 with every weight drawn from N(0, 0.1), saved to `folder`."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
    model.save_pretrained(folder)
    return folder


def make_random(model_type: str, **kwargs):
    """A maker of a random fp32 model of `model_type` (tiny widths), saved as transformers saves it."""
    def make(folder: Path) -> Path:
        import torch
        from transformers import AutoConfig
        torch.manual_seed(0)
        sizes = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
        config = AutoConfig.for_model(model_type, **dict(sizes, **kwargs))
        return save_random(config, folder)
    return make


MADE = {"@gemma3_vl": make_gemma3_vl,
        "@ernie4_5_moe": make_random("ernie4_5_moe", moe_num_experts=8, moe_k=2, moe_intermediate_size=32,
                                     moe_num_shared_experts=1),
        "@ernie4_5": make_random("ernie4_5", head_dim=16),
        "@arcee": make_random("arcee"),
        "@granite": make_random("granite", embedding_multiplier=12.0, attention_multiplier=0.15,
                                residual_multiplier=0.22, logits_scaling=8.0),
        "@granitemoeshared": make_random("granitemoeshared", num_local_experts=4, num_experts_per_tok=2,
                                         shared_intermediate_size=24, embedding_multiplier=12.0,
                                         attention_multiplier=0.15, residual_multiplier=0.22, logits_scaling=8.0),
        "@granitemoe_swa": make_random("granitemoe_swa", num_local_experts=4, num_experts_per_tok=2,
                                       shared_intermediate_size=24, sliding_window=4, layer_rope_theta=[10000.0, 0, 500.0],
                                       residual_multiplier=0.22, logits_scaling=8.0),
        "@glm4": make_random("glm4", head_dim=16, pad_token_id=0),
        "@qwen3_5": make_random("qwen3_5_text", head_dim=16, num_hidden_layers=4, linear_num_key_heads=2,
                                linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8),
        "@qwen3_5_moe": make_random("qwen3_5_moe_text", head_dim=16, num_hidden_layers=4, linear_num_key_heads=2,
                                    linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
                                    num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                                    shared_expert_intermediate_size=24),
        "@granitemoehybrid": make_random("granitemoehybrid", num_local_experts=4, num_experts_per_tok=2,
                                         shared_intermediate_size=24, mamba_n_heads=8, mamba_d_state=16,
                                         mamba_chunk_size=16, residual_multiplier=0.22, logits_scaling=8.0,
                                         layer_types=["mamba", "attention", "mamba"])}


def main(binary: str, fixtures: Path, only: list[str]) -> int:
    check = Path(__file__).with_name("check_lora_adapter.py")
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "train.jsonl"
        data.write_text("".join(f'{{"input_ids": {[(i * 13 + t * 7) % 90 + 2 for t in range(5 + i % 7)]}}}\n'
                                for i in range(40)))
        for n, (fixture, settings) in enumerate(CASES):
            if only and not any(o in fixture for o in only):  # the cases whose fixture names contain one of these
                continue
            out, merged = Path(scratch) / f"run{n}", Path(scratch) / f"merged{n}"
            base = MADE[fixture](Path(scratch) / fixture[1:]) if fixture in MADE else fixtures / fixture
            command = [binary, "finetune", "--set", f"model={base}", "--set", f"data.train={data}",
                       "--set", f"output.dir={out}", "--set", "training.max_steps=2", "--set", "training.device=cpu",
                       "--set", "lora.rank=8", "--set", "data.max_length=16", "--set", "optimizer.lr=1e-2", "--set",
                       "schedule.warmup_steps=0"]
            for setting in settings:
                command += ["--set", setting]
            steps = [command, [binary, "merge", str(base), str(out / "final-model"), str(merged)],
                     [sys.executable, str(check), str(base), str(out / "final-model"), str(merged)]]
            for step in steps:
                result = subprocess.run(step, capture_output=True, text=True)
                if result.returncode != 0:
                    break
            last = (result.stdout.strip().splitlines() or [result.stderr.strip()[-300:]])[-1]
            print(f"{'ok  ' if result.returncode == 0 else 'FAIL'} {fixture} {' '.join(settings)}: {last}")
            failures += result.returncode != 0
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))
