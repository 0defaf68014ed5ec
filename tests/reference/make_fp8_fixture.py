#!/usr/bin/env python3
"""Builds deepseek_v3_fp8_tiny: deepseek_v3_tiny's weights quantised the way DeepSeek-V3's released checkpoints
are (float8_e4m3fn with one float32 `weight_scale_inv` per block of `weight_block_size`, here [8, 4] so that
every matrix has several blocks in both directions; DeepSeek-V3 uses [128, 128]), and the bf16 weights
transformers dequantises them to on load (`dequantized.safetensors`): moetune must load the same bits.

Only the 2-D projection weights are quantised (as in the released files): norms, the embedding, lm_head, the
router and its correction bias stay as they are.

Run:  /work/refenv/bin/python tests/reference/make_fp8_fixture.py tests/fixtures
"""
import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

BLOCK = (8, 4)
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max
QUANTISED = ("q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "gate_proj", "up_proj",
             "down_proj")


def quantise(w: torch.Tensor):
    rows, cols = w.shape
    bm, bn = BLOCK
    assert rows % bm == 0 and cols % bn == 0, (w.shape, BLOCK)
    blocks = w.reshape(rows // bm, bm, cols // bn, bn)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale_inv = (amax / FP8_MAX).to(torch.float32)  # weight ≈ fp8 · scale_inv, per block
    q = (blocks / scale_inv[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(rows, cols), scale_inv


def main(root: Path) -> None:
    source, folder = root / "deepseek_v3_tiny", root / "deepseek_v3_fp8_tiny"
    folder.mkdir(exist_ok=True)
    tensors = load_file(source / "model.safetensors")
    out = {}
    for name, w in tensors.items():
        if name.endswith(".weight") and w.dim() == 2 and name.split(".")[-2] in QUANTISED:
            q, s = quantise(w)
            out[name] = q
            out[name[: -len(".weight")] + ".weight_scale_inv"] = s
        else:
            out[name] = w
    save_file(out, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": list(BLOCK)}
    config["dtype"] = "bfloat16"
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    shutil.copy(source / "generation_config.json", folder / "generation_config.json")

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    assert all(v.dtype != torch.float8_e4m3fn for v in state.values()), "transformers kept FP8 weights"
    save_file(state, folder / "dequantized.safetensors", metadata={"format": "pt"})
    made = {"torch": torch.__version__, "transformers": transformers.__version__, "block": list(BLOCK),
            "loaded_with": "AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16) on the CPU"}
    (folder / "expected.json").write_text(json.dumps({"made_with": made}, indent=2) + "\n")
    print(f"{folder}: {sum(1 for k in out if k.endswith('_scale_inv'))} quantised weights; "
          f"{len(state)} dequantised tensors; types {sorted({str(v.dtype) for v in state.values()})}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"))
