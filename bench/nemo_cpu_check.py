#!/usr/bin/env python3
"""A CPU check of bench/nemo_train.py's NeMo set-up and training step against HF, for machines without a GPU.

    torchrun --nproc-per-node 2 bench/nemo_cpu_check.py --ep-size 2|1 [--aux-coef 0.01] [--bf16-compute]

Two gloo ranks build NeMo AutoModel 0.7.0's Qwen3-MoE from tests/fixtures/qwen3_moe_tiny with nemo_train.py's
own functions (distributed section, backend with eager attention, from_config with the folder's weights, FSDP2 +
expert parallelism) and train 3 steps with its NemoTrainStep, each rank on its own 2 rows; rank 0 then trains
HF transformers on the same rows of both ranks in one batch. By default FSDP2 computes in fp32 here (NeMo's own
default is bf16 compute) and the aux loss is off (NeMo's and HF's aux losses are defined differently): then the
mean cross-entropy over all ranks and the clipped gradient norm must equal HF's to 1e-5 relative (exit 1 if not).

NeMo 0.7.0 asks for CUDA in a few places that a CPU run passes with patches made here, and only here: tensors
meant for cuda:current_device() go to the CPU; torch >= 2.15 lacks the FSDPParam method NeMo wraps; the
triton 3.9 of the reference environment rejects an autotune key of NeMo's LoRA kernel (not used), so triton is
hidden. Run with the reference Python (/work/refenv) and NeMo's wheels in $NEMO_SITE (default /tmp/nemo-site).
"""
import argparse
import os
import sys
from pathlib import Path

sys.modules["triton"] = None  # see the header: only NeMo's unused LoRA kernel needs it at import

import torch  # noqa: E402
from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/qwen3_moe_tiny"
ROWS_PER_RANK, SEQ, STEPS, LR, MAX_NORM = 2, 40, 3, 1e-3, 1.0


def run_cuda_placements_on_the_cpu():
    """NeMo places its tensors on cuda:current_device(); without a GPU that place is the CPU."""
    def cpu(device):
        return "cpu" if device is not None and torch.device(device).type == "cuda" else device

    empty_like, to = torch.empty_like, torch.Tensor.to

    def tensor_to(self, *args, **kwargs):
        args = tuple(cpu(a) if isinstance(a, (str, torch.device)) and str(a).startswith("cuda") else a for a in args)
        if "device" in kwargs:
            kwargs["device"] = cpu(kwargs["device"])
        return to(self, *args, **kwargs)

    torch.cuda.current_device = lambda: 0
    torch.empty_like = lambda t, *a, device=None, **k: empty_like(t, *a, device=cpu(device), **k)
    torch.Tensor.to = tensor_to
    if not hasattr(FSDPParam, "to_accumulated_grad_if_needed"):  # renamed after torch 2.11; NeMo 0.7.0 wraps it
        FSDPParam.to_accumulated_grad_if_needed = lambda self: None


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ep-size", type=int, default=2)
    parser.add_argument("--aux-coef", type=float, default=0.0, help="router_aux_loss_coef of both models")
    parser.add_argument("--bf16-compute", action="store_true", help="NeMo's default FSDP2 policy (bf16 compute)")
    args = parser.parse_args()
    run_cuda_placements_on_the_cpu()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import nemo_train

    nemo = nemo_train.import_nemo()
    env = nemo.initialize_distributed(backend="gloo", timeout_minutes=2)
    options = nemo_train.distributed(args.ep_size)
    if not args.bf16_compute:
        options["mp_policy"] = {"param_dtype": "float32", "reduce_dtype": "float32", "output_dtype": None}
    setup = nemo.create_distributed_setup_from_config(options, world_size=env.world_size, timeout_minutes=2)
    config = nemo.NeMoAutoConfig.from_pretrained(str(FIXTURE))
    config.router_aux_loss_coef = args.aux_coef
    model = nemo_train.build_model(nemo, config, nemo_train.backend(compile_attn=False), setup, torch.float32)
    model.model.rotary_emb.device = torch.device("cpu")
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    trainer = nemo_train.NemoTrainStep(nemo, model, setup, params, LR, MAX_NORM, local_tokens=ROWS_PER_RANK * (SEQ - 1))
    torch.manual_seed(0)
    data = torch.randint(0, config.vocab_size, (STEPS, env.world_size * ROWS_PER_RANK, SEQ))
    nemo_rows = []
    for step in range(STEPS):
        ids = data[step, env.rank * ROWS_PER_RANK:(env.rank + 1) * ROWS_PER_RANK]
        loss, norm = trainer.step(ids, nemo_train.shifted_labels(ids))
        _, everyone = trainer.rank_and_global_loss(loss)
        nemo_rows.append((everyone, float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm),
                          trainer.aux_loss()))
    if env.rank != 0:
        torch.distributed.barrier()
        return 0

    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(FIXTURE, dtype=torch.float32, attn_implementation="sdpa",
                                              experts_implementation="eager")
    hf.config.router_aux_loss_coef = args.aux_coef
    hf.train()
    optimizer = torch.optim.AdamW(hf.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=True)
    worst = 0.0
    for step in range(STEPS):
        out = hf(input_ids=data[step], labels=data[step], output_router_logits=args.aux_coef > 0)
        ce = (out.loss - args.aux_coef * out.aux_loss if args.aux_coef > 0 else out.loss).item()
        out.loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(hf.parameters(), MAX_NORM).item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        nemo_ce, nemo_norm, nemo_aux = nemo_rows[step]
        worst = max(worst, relative(nemo_ce, ce), relative(nemo_norm, norm))
        print(f"step {step + 1}: cross-entropy NeMo {nemo_ce:.6f} HF {ce:.6f} | grad norm NeMo {nemo_norm:.6f} "
              f"HF {norm:.6f} | NeMo aux {nemo_aux:.4f}", flush=True)
    exact = not args.bf16_compute and args.aux_coef == 0
    verdict = ("PASS" if worst <= 1e-5 else "FAIL") if exact else "(no bound: bf16 compute or aux loss on)"
    print(f"NeMo EP={args.ep_size} on {env.world_size} CPU ranks vs HF: largest relative difference {worst:.2e} {verdict}")
    torch.distributed.barrier()
    return 1 if exact and worst > 1e-5 else 0


if __name__ == "__main__":
    sys.exit(main())
