#!/usr/bin/env python3
"""Checks an adapter moetune saved (finetune with `lora:`) against PEFT, and moetune's merge against PEFT's.

  check_lora_adapter.py BASE ADAPTER [MERGED]

Loads ADAPTER onto BASE with PeftModel.from_pretrained (it must load with no missing or unexpected keys), and,
given MERGED (the folder `moetune merge BASE ADAPTER MERGED` wrote), compares PEFT's logits on a random batch
with transformers' logits of MERGED, and PEFT's merge_and_unload weights with MERGED's. Prints the largest
differences; exits non-zero above 1e-5 relative.
"""
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM


def load(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def main():
    base, adapter = sys.argv[1], sys.argv[2]
    peft_model = PeftModel.from_pretrained(load(base), adapter)
    ids = torch.randint(0, peft_model.config.get_text_config().vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        peft_logits = peft_model(input_ids=ids, use_cache=False).logits
    print("adapter loads in PEFT; logits", tuple(peft_logits.shape))
    if len(sys.argv) < 4:
        return
    merged = load(sys.argv[3])
    with torch.no_grad():
        logits = merged(input_ids=ids, use_cache=False).logits
    worst = ((logits - peft_logits).norm() / peft_logits.norm()).item()
    theirs = dict(peft_model.merge_and_unload().named_parameters())
    for name, p in merged.named_parameters():
        worst = max(worst, ((p - theirs[name]).norm() / theirs[name].norm().clamp_min(1e-30)).item())
    print(f"moetune merge vs PEFT: largest relative difference {worst:.3g} (logits and every weight)")
    sys.exit(0 if worst <= 1e-5 else 1)


if __name__ == "__main__":
    main()
