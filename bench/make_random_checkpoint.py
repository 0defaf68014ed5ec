#!/usr/bin/env python3
"""Writes the Qwen3-30B-A3B architecture with random weights as fast as the machine allows, for the 48-layer LoRA
benchmark (61 GB of bf16): each layer's tensors are drawn on the GPU (normal, std 0.02 as initializer_range; norms
at one) and written as one safetensors shard per layer by a pool of threads while the next layer is drawn. The
experts go in transformers v5's fused layout (mlp.experts.gate_up_proj [E, 2I, H], down_proj [E, H, I]), which
moetune loads as it is. Shards go to the first of --dirs with room for them (the model folder links to each), so
the weights may be split between /dev/shm and a disk.

    python3 bench/make_random_checkpoint.py MODEL_DIR --layers 48 [--dirs /dev/shm/w /tmp/w] [--tiny]

The config is bench/make_reference_model.py's (output_router_logits on, aux loss coefficient 0.001).
"""
import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_reference_model import reference_config  # noqa: E402


def write_safetensors(path: Path, tensors: dict):
    """safetensors' format written directly from the host tensors' memory (save_file would copy each once more)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little"))
        f.write(encoded)
        for t in tensors.values():
            f.write(t.contiguous().view(torch.uint8).reshape(-1).numpy().data)


def layer_tensors(config, layer: int, generator: torch.Generator, device: str) -> dict:
    H, I, E = config.hidden_size, config.moe_intermediate_size, config.num_experts
    d, nq, nkv = config.head_dim, config.num_attention_heads, config.num_key_value_heads
    p = f"model.layers.{layer}."

    def normal(*shape):
        return torch.empty(shape, dtype=torch.bfloat16, device=device).normal_(0.0, config.initializer_range, generator=generator)

    def ones(*shape):
        return torch.ones(shape, dtype=torch.bfloat16, device=device)

    return {
        p + "input_layernorm.weight": ones(H), p + "post_attention_layernorm.weight": ones(H),
        p + "self_attn.q_proj.weight": normal(nq * d, H), p + "self_attn.k_proj.weight": normal(nkv * d, H),
        p + "self_attn.v_proj.weight": normal(nkv * d, H), p + "self_attn.o_proj.weight": normal(H, nq * d),
        p + "self_attn.q_norm.weight": ones(d), p + "self_attn.k_norm.weight": ones(d),
        p + "mlp.gate.weight": normal(E, H),
        p + "mlp.experts.gate_up_proj": normal(E, 2 * I, H), p + "mlp.experts.down_proj": normal(E, H, I),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--dirs", type=Path, nargs="+", default=None, help="where the shards may go, in order")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    start = time.time()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = reference_config(args.layers, args.tiny)
    args.out.mkdir(parents=True, exist_ok=True)
    config.to_json_file(str(args.out / "config.json"))
    dirs = args.dirs or [args.out]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)
    H, V = config.hidden_size, config.vocab_size
    shards = [{"model.embed_tokens.weight": torch.empty(V, H, dtype=torch.bfloat16, device=device).normal_(0, 0.02, generator=generator),
               "model.norm.weight": torch.ones(H, dtype=torch.bfloat16, device=device),
               "lm_head.weight": torch.empty(V, H, dtype=torch.bfloat16, device=device).normal_(0, 0.02, generator=generator)}]
    count = args.layers + 1
    weight_map, total = {}, 0
    reserved = {d: 0 for d in dirs}  # bytes promised to writes still running

    def place(nbytes: int) -> Path:
        for d in dirs:
            if shutil.disk_usage(d).free - reserved[d] > nbytes + (2 << 30):
                reserved[d] += nbytes
                return d
        raise SystemExit(f"no room for a {nbytes / 1e9:.1f} GB shard in {', '.join(map(str, dirs))}")

    def write(tensors: dict, name: str, where: Path, nbytes: int):
        write_safetensors(where / name, {k: v.cpu() for k, v in tensors.items()})
        if where != args.out:
            link = args.out / name
            if link.exists() or link.is_symlink():
                link.unlink()
            link.symlink_to(where / name)
        reserved[where] -= nbytes

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = []
        for index in range(count):
            tensors = shards[0] if index == 0 else layer_tensors(config, index - 1, generator, device)
            name = f"model-{index + 1:05d}-of-{count:05d}.safetensors"
            nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
            total += nbytes
            for key in tensors:
                weight_map[key] = name
            futures.append(pool.submit(write, tensors, name, place(nbytes), nbytes))
            while sum(not f.done() for f in futures) >= 6:  # keep the GPU copies waiting for a writer bounded
                time.sleep(0.01)
        for f in futures:
            f.result()
    with open(args.out / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    seconds = time.time() - start
    print(f"wrote {args.layers} layers, {total / 1e9:.1f} GB in {seconds:.1f} s ({total / 1e9 / seconds:.2f} GB/s) to "
          + ", ".join(f"{d} ({sum(1 for p in args.out.iterdir() if p.is_symlink() and p.resolve().parent == d.resolve())} shards)" for d in dirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
