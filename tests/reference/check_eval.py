#!/usr/bin/env python3
"""Checks `moetune eval` against transformers: the same mean token cross-entropy on the same JSONL.

Each line is scored alone. transformers' loss with labels=input_ids is that line's mean over its n-1 predicted
tokens, so the file's mean is sum(mean * (n-1)) / sum(n-1), the token-weighted mean moetune reports. The MoE
load-balancing term is left out (output_router_logits=False): eval reports the cross-entropy alone.

Run:  /work/refenv/bin/python tests/reference/check_eval.py build/src/moetune/moetune tests/fixtures
"""
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

# Every fixture; transformers loads the bf16 ones in fp32, as moetune does, so both sides compute in fp32.
FIXTURES = ["qwen3_moe_tiny", "qwen3_moe_tied_bf16", "qwen3_moe_tied_f32", "qwen3_tiny", "qwen3_f32", "llama_tiny", "mixtral_tiny",
            "qwen2_moe_tiny", "gpt_oss_tiny", "gpt_oss_mxfp4_tiny", "deepseek_v3_tiny", "deepseek_v3_qproj_tied",
            "nemotron_h_tiny"]
TOLERANCE = 1e-5
LENGTHS = [2, 5, 17, 40]  # unequal, so a mean of per-line means would not match; within every max_position
VOCAB = 96


def make_sequences() -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in LENGTHS]


# Vision-language model types whose wrapper transformers' AutoModelForCausalLM does not build (it builds Qwen3.5's text
# model alone, reading its own tie and dropping the vision tower): the image-text auto class builds them.
IMAGE_TEXT_ONLY = ("qwen3_5", "qwen3_5_moe")


def load_reference(folder: Path):
    """transformers' model of `folder` in fp32, in eval mode: the causal LM, or for Qwen3.5's vision-language
    checkpoints the wrapper itself (the causal-LM auto class would build its text model alone, reading its own tie and
    dropping the vision tower the folder holds)."""
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") in IMAGE_TEXT_ONLY:
        from transformers import AutoModelForImageTextToText
        return AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).float().eval()
    # .float(): a dequantizing MXFP4 load (gpt_oss_mxfp4_tiny) keeps the experts bf16 whatever dtype asks for.
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).float().eval()


def no_aux_loss(model) -> dict:
    """The forward arguments that leave the MoE load-balancing term out of the loss."""
    return {"output_router_logits": False} if hasattr(model.config, "output_router_logits") else {}


def mean_token_loss(model, sequences: list[list[int]]) -> tuple[float, int]:
    """Each line scored alone; the token-weighted mean of the lines' mean cross-entropies, and the token count."""
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for ids in sequences:
            input_ids = torch.tensor([ids])
            line_mean = model(input_ids=input_ids, labels=input_ids, **no_aux_loss(model)).loss.item()
            loss_sum += line_mean * (len(ids) - 1)
            tokens += len(ids) - 1
    return loss_sum / tokens, tokens


def transformers_loss(folder: Path, sequences: list[list[int]]) -> tuple[float, int]:
    return mean_token_loss(load_reference(folder), sequences)


def main(binary: str, fixtures: Path) -> int:
    sequences = make_sequences()
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "eval.jsonl"
        data.write_text("".join(json.dumps({"input_ids": ids}) + "\n" for ids in sequences))
        for name in FIXTURES:
            result = subprocess.run([binary, "eval", str(fixtures / name), "--data", str(data), "--json"],
                                    check=True, capture_output=True, text=True)
            report = json.loads(result.stdout)
            expected_loss, expected_tokens = transformers_loss(fixtures / name, sequences)
            difference = abs(report["loss"] - expected_loss) / expected_loss
            ok = difference <= TOLERANCE and report["tokens"] == expected_tokens
            failures += not ok
            print(f"{name:16} tokens {report['tokens']} (transformers {expected_tokens})  loss moetune "
                  f"{report['loss']:.9f}  transformers {expected_loss:.9f}  relative difference {difference:.3g}  "
                  f"perplexity {report['perplexity']:.4f} (transformers {math.exp(expected_loss):.4f})  "
                  f"{'OK' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
