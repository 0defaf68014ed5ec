#!/usr/bin/env python3
"""The Hugging Face side of the benchmark: full fine-tuning of MODEL_DIR on DATA, timed step by step.

    python3 bench/hf_train.py MODEL_DIR DATA.jsonl --experts grouped_mm|eager [--compile] --micro-batch 2 \
        --seq 4096 --steps 20 --warmup 3 --json OUT.json [--device cuda|cpu]

What a user of transformers v5 gets by default when fine-tuning a model loaded in bf16: bf16 parameters,
gradients and AdamW states (torch.optim.AdamW, foreach), lr 1e-5 constant, no weight decay (moetune's default
too), gradients clipped at norm 1.0, SDPA attention, output_router_logits on (router_aux_loss_coef x the
load-balancing loss is part of the loss). The experts are run by transformers' experts interface, chosen with
from_pretrained(..., experts_implementation="grouped_mm" | "eager").

Lines of DATA are read in file order, micro-batch after micro-batch (wrapping around), each cut to --seq tokens,
with labels = input_ids: the same tokens moetune sees with data.shuffle off and packing off.

--liger: HF + Liger kernels as Liger's users run it: its RoPE, RMSNorm and fused linear cross-entropy patched into the
model's family (liger_kernel 0.8.5, `apply_liger_kernel_to_<model_type>`); Liger's SwiGLU stays off, since on
transformers v5 it replaces the grouped_mm experts with its own (the run keeps --experts). The loss is the same
cross-entropy (plus the same aux term): the fused kernel only never holds the logits.

--fsdp (under torchrun, one process per GPU): FSDP2, `fully_shard` on every decoder layer and on the model
(the recipe of transformers' and PyTorch's FSDP2 examples); each rank trains its own micro-batches (rank r takes
every world-th one); tokens/s are per GPU and the peak memory is the largest over the ranks; rank 0 writes.

Time = one whole optimizer step (forward, backward, clipping, optimizer.step, zero_grad) between two
torch.cuda.synchronize() calls; the report uses the median over the steps after --warmup. The JSON is written
on success, on out-of-memory ("status": "oom") and on any other failure ("status": "error").
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_flops import flops_per_token_from_folder, throughput  # noqa: E402


def load_batches(path: Path, micro_batch: int, seq: int, steps: int, device: str) -> list:
    rows = []
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            ids = json.loads(line)["input_ids"]
            if len(ids) < seq:
                raise SystemExit(f"{path}:{number}: {len(ids)} tokens, fewer than --seq {seq}")
            rows.append(ids[:seq])
    if not rows:
        raise SystemExit(f"{path}: no sequences")
    needed = steps * micro_batch
    if needed > len(rows):
        print(f"note: {needed} sequences needed, {len(rows)} in {path}: wrapping around", flush=True)
    ordered = [rows[i % len(rows)] for i in range(needed)]
    return [torch.tensor(ordered[s * micro_batch:(s + 1) * micro_batch], dtype=torch.long, device=device)
            for s in range(steps)]


class Memory:
    """Framework peak (max_memory_allocated) and the device's used memory, read after every step."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.device_used_max = 0

    def sample(self):
        if self.cuda:
            free, total = torch.cuda.mem_get_info()
            self.device_used_max = max(self.device_used_max, total - free)

    def summary(self) -> dict:
        if not self.cuda:
            return {"peak_allocated_bytes": None, "peak_reserved_bytes": None, "device_used_bytes": None,
                    "device_total_bytes": None}
        self.sample()
        return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                "device_used_bytes": self.device_used_max,
                "device_total_bytes": torch.cuda.mem_get_info()[1]}


def load_model(model_dir: Path, experts: str, device: str, attn: str = "sdpa"):
    options = dict(dtype=torch.bfloat16, attn_implementation=attn, experts_implementation=experts)
    if device != "cpu":
        try:  # straight onto the GPU; needs accelerate, which the GPU machine has
            return AutoModelForCausalLM.from_pretrained(model_dir, device_map=device, **options)
        except (ImportError, ValueError) as e:
            if "accelerate" not in str(e):
                raise
    return AutoModelForCausalLM.from_pretrained(model_dir, **options).to(device)


def mamba2_kernels_installed() -> dict:
    """Nemotron-H: whether the packages of transformers' fast Mamba2 path are installed. Without them transformers
    5.17 runs its reference PyTorch implementations of mamba_split_conv1d_scan_combined, mamba_chunk_scan_combined
    and causal_conv1d_fn (and logs that it does, once per function)."""
    import importlib.util
    return {name: importlib.util.find_spec(name) is not None for name in ("mamba_ssm", "causal_conv1d")}


def apply_liger(model_dir: Path) -> list:
    """Patches Liger's kernels into the model's family before it is built; returns the kernels patched."""
    import inspect
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    model_type = json.loads((model_dir / "config.json").read_text())["model_type"]
    apply = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
    if apply is None:
        raise SystemExit(f"--liger: liger_kernel has no kernels for model_type {model_type!r}")
    wanted = dict(rope=True, rms_norm=True, fused_linear_cross_entropy=True, cross_entropy=False, swiglu=False)
    accepted = inspect.signature(apply).parameters
    options = {name: value for name, value in wanted.items() if name in accepted}
    apply(**options)
    return [name for name, value in options.items() if value]


def synchronize(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def add_step_statistics(result: dict, step_seconds: list, warmup: int, tokens_per_step: int, flops_per_token: float):
    """The median step after the warm-up and the throughput it gives (nothing when no step was measured)."""
    measured = step_seconds[warmup:]
    if measured:
        median = statistics.median(measured)
        result.update(step_seconds_median=median, tokens_per_second=tokens_per_step / median,
                      **throughput(tokens_per_step / median, flops_per_token))


def print_summary(result: dict, json_path: Path):
    print(f"{result['label']}: median step {result['step_seconds_median']:.3f} s, {result['tokens_per_second']:.0f} tokens/s, "
          f"{result['model_tflops']:.1f} TFLOP/s, MFU {result['mfu']:.1%}", flush=True)
    if result["peak_allocated_bytes"] is not None:
        print(f"peak allocated {result['peak_allocated_bytes'] / 1e9:.1f} GB, "
              f"device used {result['device_used_bytes'] / 1e9:.1f} GB", flush=True)
    print(f"wrote {json_path}")


def record_failure(write, error: Exception, step: int) -> int:
    """Writes the JSON of a run that stopped at `step`: "oom" is a result (exit 0), anything else an error (exit 1)."""
    if isinstance(error, torch.OutOfMemoryError):
        print(f"out of memory at step {step}: {error}", flush=True)
        write("oom", error=str(error).splitlines()[0] if str(error) else "out of memory", failed_step=step)
        return 0
    traceback.print_exc()
    write("error", error=f"{type(error).__name__}: {error}", failed_step=step)
    return 1


def take_largest_peaks_over_ranks(result: dict, device: str):
    """Under torchrun every rank measures its own memory; the report keeps the largest."""
    import torch.distributed as dist
    for key in ("peak_allocated_bytes", "peak_reserved_bytes", "device_used_bytes"):
        value = torch.tensor([float(result.get(key) or 0)], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        result[key] = int(value.item())
    result["world_size"] = dist.get_world_size()


def add_job_arguments(parser: argparse.ArgumentParser):
    """The job every runner takes (bench/nemo_train.py too): model, data, batch, steps, optimizer, output."""
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("data", type=Path)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20, help="all steps, warm-up included")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the median")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--label", default=None, help="name of this run in the report")


def parse_job_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    args = parser.parse_args()
    if args.steps <= args.warmup:
        raise SystemExit("--steps must be larger than --warmup: no step would be measured")
    return args


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(parser)
    parser.add_argument("--experts", choices=["grouped_mm", "eager"], required=True)
    parser.add_argument("--attn", default="sdpa",
                        help="attn_implementation (GPT-OSS has no sdpa path: its default is eager, for the sinks)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (compile time is in warm-up)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--fsdp", action="store_true", help="FSDP2 over the torchrun ranks")
    parser.add_argument("--liger", action="store_true", help="Liger's RoPE, RMSNorm and fused linear cross-entropy")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute each decoder layer in the backward pass (non-reentrant), as HF's Trainer does")
    args = parse_job_arguments(parser)
    rank, world = 0, 1
    if args.fsdp:
        import torch.distributed as dist
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        args.device = f"cuda:{local}"
    liger_kernels = apply_liger(args.model_dir) if args.liger else []
    label = args.label or (f"HF {args.experts}" + (" + Liger" if args.liger else "") + (" + compile" if args.compile else "")
                           + (" + checkpointing" if args.gradient_checkpointing else "")
                           + (f" + FSDP2 x{world}" if args.fsdp else ""))
    flops = flops_per_token_from_folder(args.model_dir, args.seq)
    tokens_per_step = args.micro_batch * args.seq
    result = {"label": label, "runner": "hf", "status": "running", "model_dir": str(args.model_dir),
              "data": str(args.data), "experts_implementation": args.experts, "compile": args.compile,
              "device": args.device, "micro_batch": args.micro_batch, "seq": args.seq, "steps": args.steps,
              "warmup": args.warmup, "lr": args.lr, "max_grad_norm": args.max_grad_norm,
              "tokens_per_step": tokens_per_step, **flops, "liger_kernels": liger_kernels,
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    if args.device.startswith("cuda"):
        result["device_name"] = torch.cuda.get_device_name()
    print(f"{label}: {flops['flops_per_token'] / 1e9:.3f} GFLOP per token "
          f"({flops['active_matmul_params'] / 1e6:.1f} M active matmul parameters)", flush=True)

    memory = Memory(args.device)
    step_seconds, losses, aux_losses, grad_norms = [], [], [], []
    step = 0

    def write(status: str, **extra):
        result.update(status=status, completed_steps=len(step_seconds), step_seconds=step_seconds, losses=losses,
                      aux_losses=aux_losses, grad_norms=grad_norms, **memory.summary(), **extra)
        add_step_statistics(result, step_seconds, args.warmup, tokens_per_step, flops["flops_per_token"])
        if args.fsdp:
            take_largest_peaks_over_ranks(result, args.device)
        if rank == 0:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1) + "\n")

    try:
        batches = load_batches(args.data, args.micro_batch, args.seq, args.steps * world, args.device)[rank::world]
        start = time.perf_counter()
        model = load_model(args.model_dir, args.experts, args.device, args.attn)
        result["load_seconds"] = time.perf_counter() - start
        chosen = model.config._experts_implementation
        if chosen != args.experts:
            raise RuntimeError(f"asked for experts_implementation={args.experts!r}, transformers chose {chosen!r}")
        result["attn_implementation"] = model.config._attn_implementation
        if model.config.model_type == "nemotron_h":
            result["mamba2_kernels_installed"] = mamba2_kernels_installed()
            print(f"Mamba2 kernels installed: {result['mamba2_kernels_installed']}", flush=True)
        model.config.use_cache = False
        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        result["gradient_checkpointing"] = args.gradient_checkpointing
        model.train()
        if args.fsdp:
            from torch.distributed.fsdp import fully_shard
            for layer in model.model.layers:
                fully_shard(layer)
            fully_shard(model)
        params = [p for p in model.parameters() if p.requires_grad]
        result["parameters"] = sum(p.numel() for p in params)
        if any(p.dtype != torch.bfloat16 for p in params):
            raise RuntimeError("a parameter is not bf16")
        coef = getattr(model.config, "router_aux_loss_coef", 0.0)  # DeepSeek-V3 trains no aux loss
        forward = torch.compile(model) if args.compile else model
        optimizer = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                      foreach=True)

        for step, input_ids in enumerate(batches, 1):
            synchronize(args.device)
            begin = time.perf_counter()
            out = forward(input_ids=input_ids, labels=input_ids, output_router_logits=True, use_cache=False)
            loss, aux = out.loss, getattr(out, "aux_loss", None)
            del out  # as transformers' Trainer does: the bf16 logits (2.5 GB here) are not held through backward
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm, foreach=True)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            synchronize(args.device)
            seconds = time.perf_counter() - begin
            memory.sample()
            step_seconds.append(seconds)
            aux_value = aux.item() if aux is not None else float("nan")
            # "loss" is the language-model loss alone, as moetune logs it; the aux term is kept beside it.
            losses.append(loss.item() - (coef * aux_value if aux is not None else 0.0))
            aux_losses.append(aux_value)
            grad_norms.append((grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm).item())
            print(f"step {step}/{args.steps} | loss {losses[-1]:.4f} | aux {aux_value:.4f} | "
                  f"grad norm {grad_norms[-1]:.3f} | {seconds:.3f} s | {tokens_per_step / seconds:.0f} tok/s", flush=True)
            del loss, aux
    except Exception as e:  # noqa: BLE001 - the report must say what happened to every run
        return record_failure(write, e, step)

    write("ok")
    print_summary(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
