#!/usr/bin/env python3
"""Writes the LoRA parity fixtures the C++ tests compare moetune against (1e-5):

  qwen3_moe_tiny_lora  on tests/fixtures/qwen3_moe_tiny: r=4, alpha=8, target_modules q/k/v/o_proj,
                       target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"] (layers 0, 2),
                       modules_to_save=["gate", "post_attention_layernorm"] (routers and norms trained in full).
  qwen3_f32_lora       on tests/fixtures/qwen3_f32 (dense): r=4, alpha=6, target_modules="all-linear",
                       use_rslora (attention and MLP projections; lm_head excluded, as PEFT does).

The dense MLP is checked on the dense model because PEFT 0.21, on qwen3_moe, rewrites any target_modules
naming gate_proj/up_proj/down_proj (list, regex or all-linear) into expert target_parameters with the gate_up
rank and alpha doubled, and leaves the dense-MLP layers (mlp_only_layers) without LoRA.

A is PEFT's init (kaiming-uniform, seeded); B is set to N(0, 0.1²) (seeded) so that the adapter changes the
output and every LoRA gradient is non-zero. Writes into each fixture folder:

  adapter/                 adapter_config.json + adapter_model.safetensors exactly as PEFT saves them
  lora_parity.safetensors  input_ids [2,8], labels (= input_ids), logits [2,8,V], loss (CE + coef * aux, as
                           transformers returns it with output_router_logits), grad.<saved name> (gradient of
                           loss for every LoRA tensor, under the names adapter_model.safetensors uses),
                           (modules_to_save included: their saved names are "base_model.model." + HF name),
                           train.losses [3] and train.param.<saved name> after 3 torch AdamW steps
                           (lr 1e-5, betas 0.9/0.999, eps 1e-8, weight decay 0, no clipping),
                           merged.logits (merge_and_unload of the adapter, same batch).
  README.md                the versions that made it.

Checks on the way: the saved adapter, loaded back with PeftModel.from_pretrained, gives the same logits.
(check_lora_adapter.py checks an adapter moetune trained and saved.)

Run: /work/refenv/bin/python tests/reference/make_lora_parity.py tests/fixtures
"""
import json
import shutil
import sys
from pathlib import Path

import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

SEED = 1234
LR, STEPS = 1e-5, 3
# fixture folder made -> (base fixture, LoraConfig keywords)
CASES = {
    "qwen3_moe_tiny_lora": ("qwen3_moe_tiny", dict(
        r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
        modules_to_save=["gate", "post_attention_layernorm"])),
    "qwen3_f32_lora": ("qwen3_f32", dict(r=4, lora_alpha=6, target_modules="all-linear", use_rslora=True)),
}


def base(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


def run(model, ids):
    return model(input_ids=ids, labels=ids, use_cache=False, output_router_logits=True)


def saved_name(name):  # the in-memory name -> the name adapter_model.safetensors uses
    return name.replace(".modules_to_save.default", "").replace(".default", "")


def make(fixtures, name):
    base_name, keywords = CASES[name]
    source, out = fixtures / base_name, fixtures / name
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    config = LoraConfig(lora_dropout=0.0, **keywords)
    model = get_peft_model(base(source), config)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "lora_B" in key:
                p.copy_(torch.randn_like(p) * 0.1)
    out.mkdir(exist_ok=True)
    shutil.rmtree(out / "adapter", ignore_errors=True)
    model.save_pretrained(out / "adapter")
    (out / "adapter" / "README.md").unlink()  # PEFT's model-card template, nothing the tests read

    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (2, 8), generator=torch.Generator().manual_seed(SEED))
    lora = {saved_name(n): p for n, p in model.named_parameters() if p.requires_grad}
    result = {"input_ids": ids, "labels": ids.clone()}
    output = run(model, ids)
    output.loss.backward()
    result["logits"] = output.logits.detach()
    result["loss"] = output.loss.detach()
    for key, p in lora.items():
        result["grad." + key] = p.grad.detach().clone()
        assert p.grad.abs().max() > 0, key

    # The adapter as saved gives the same logits once loaded back.
    reloaded = PeftModel.from_pretrained(base(source), out / "adapter")
    with torch.no_grad():
        diff = (run(reloaded, ids).logits - result["logits"]).abs().max().item()
    assert diff == 0, diff
    with torch.no_grad():
        result["merged.logits"] = run(reloaded.merge_and_unload(), ids).logits

    optimizer = torch.optim.AdamW(list(lora.values()), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = run(model, ids).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    result["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    for key, p in lora.items():
        result["train.param." + key] = p.detach().clone()
    save_file({k: v.contiguous() for k, v in result.items()}, out / "lora_parity.safetensors")

    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
    (out / "README.md").write_text(
        f"# {name}\n\nLoRA parity fixture for moetune (issue 12), made by "
        f"tests/reference/make_lora_parity.py on tests/fixtures/{base_name} with LoraConfig({keywords}), "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + " (CPU, fp32, eager attention, one thread).\n\nSee the script's docstring for what each tensor is.\n")
    print(name, json.dumps(versions), "max |reloaded - original| logits:", diff)


def main():
    fixtures = Path(sys.argv[1])
    for name in CASES:
        make(fixtures, name)


if __name__ == "__main__":
    main()
