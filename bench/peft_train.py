#!/usr/bin/env python3
"""The Hugging Face + PEFT side of the LoRA benchmark: the Qwen3-30B-A3B architecture built from its config directly
on the GPU (random weights, transformers' own initialisation; nothing read from disk), LoRA through PEFT on the
attention projections and, with target_parameters, on the fused experts; gradient checkpointing on (without it the
48-layer model runs out of an H200's memory), experts through grouped_mm, SDPA attention, bf16, AdamW (foreach) over
the adapters. Random token ids, labels = ids, micro-batch 1. Prints one JSON line (also on out-of-memory).

    python3 bench/peft_train.py --layers 48 --seq 4096 --steps 6 --warmup 2 --rank 16 --alpha 32 [--json OUT] [--tiny]
"""
import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_reference_model import reference_config  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--no-checkpointing", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import peft
    import transformers
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = {"label": "HF + PEFT", "transformers": transformers.__version__, "peft": peft.__version__,
              "torch": torch.__version__, "layers": args.layers, "seq": args.seq, "status": "ok"}
    start = time.time()
    try:
        config = reference_config(args.layers, args.tiny)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, experts_implementation="grouped_mm",
                                                     attn_implementation="sdpa")
        result["build_seconds"] = time.time() - start
        if not args.no_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
        lora = peft.LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0,
                               target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                               target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])
        model = peft.get_peft_model(model, lora)
        model.train()
        trainable = [p for p in model.parameters() if p.requires_grad]
        result["trainable_parameters"] = sum(p.numel() for p in trainable)
        optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0, foreach=True)
        generator = torch.Generator(device="cpu").manual_seed(7)
        times, losses = [], []
        for step in range(args.steps):
            ids = torch.randint(0, config.vocab_size, (1, args.seq), generator=generator).to(device)
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
            out = model(input_ids=ids, labels=ids)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.time() - t0)
            losses.append(float(out.loss.detach()))
            print(f"step {step + 1}: loss {losses[-1]:.4f} {times[-1]:.3f} s", flush=True)
        measured = times[args.warmup:] or times
        result.update(step_seconds=statistics.median(measured), tokens_per_second=args.seq / statistics.median(measured),
                      losses=losses, step_times=times)
    except torch.OutOfMemoryError as e:
        result.update(status="oom", error=str(e)[:300])
    except Exception as e:  # noqa: BLE001
        result.update(status="error", error=f"{type(e).__name__}: {e}"[:500])
        traceback.print_exc()
    if device == "cuda":
        result["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        result["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    result["seconds"] = time.time() - start
    line = json.dumps(result)
    print(line, flush=True)
    if args.json:
        args.json.write_text(line + "\n")
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
