#!/usr/bin/env python3
"""NVIDIA NeMo AutoModel 0.7.0 on the benchmark job of bench/hf_train.py: the same model folder, data, steps and JSON.

    torchrun --nproc-per-node 2 bench/nemo_train.py MODEL_DIR DATA.jsonl --ep-size 2|1 --micro-batch 2 \
        --seq 4096 --steps 10 --warmup 3 --json OUT.json

NeMo needs transformers 5.18.0 and torchao 0.18.0, which must not replace the transformers 5.17 of the HF runs:
install the wheels with `pip install --no-deps --target /tmp/nemo-site` (scripts/gpu_nemo_bench.sh does); this
script puts $NEMO_SITE (default /tmp/nemo-site) first on sys.path and sets TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1
(torchao is imported while the model is built; its compiled parts are not needed).

Set up as NeMo's examples/llm_benchmark/qwen/qwen3_moe_30b_torch.yaml recipe wires it: initialize_distributed
(nccl), create_distributed_setup_from_config (strategy fsdp2, ep_size, moe.reshard_after_forward=False, no
activation checkpointing: the HF side has none), NeMoAutoModelForCausalLM.from_config(config of MODEL_DIR,
backend=..., distributed_setup=..., load_base_model=True) so that both sides start from the same weights. NeMo
builds its own Qwen3-MoE (GroupedExperts): with ep_size=E the experts are split over E ranks and the `torch`
dispatcher all-gathers every rank's tokens, runs the local experts and all-reduces the outputs; everything
else is FSDP2 over all ranks (bf16 parameters, fp32 gradient reduction: NeMo's default mixed-precision policy).

Backend (the fastest NeMo configuration whose loss is HF's, per /work/shared/notes/peers-and-platform.md):
attn=sdpa with compile_attn=True (torch.compile of each attention block; needs linear=torch, rms_norm=torch,
no fused RoPE), experts=torch_mm (torch._grouped_mm), dispatcher=torch, real routing (learned gate, no
fake_balanced_gate). The cross-entropy is NeMo's MaskedCrossEntropy with fp32_upcast=True, as HF computes it;
its bf16 variant (the recipe's fp32_upcast=false) is faster but its loss differs. --no-compile-attn runs eager
attention. bench/nemo_cpu_check.py runs this file's set-up and step on 2 CPU ranks against HF: with FSDP2
computing in fp32 the cross-entropy and gradient norm equal HF's to 2e-7 (EP=2 and EP=1, 3 steps, tiny fixture).

The training step is NeMo's train_ft recipe's, for one micro-batch per optimizer step: loss = the sum of the
token cross-entropies / the scored tokens of all ranks, backward of loss x data-parallel size (FSDP averages
over ranks); the aux loss (router_aux_loss_coef of the config, NeMo's per-layer Switch loss) enters the
gradients through MoEAuxLossAutoScaler with scale 1; scale_grads_and_clip_grad_norm (expert gradients
rescaled for EP, global norm clipped to --max-grad-norm); torch.optim.AdamW on the bf16 parameters as in
hf_train.py (lr 1e-5, betas 0.9/0.999, eps 1e-8, no weight decay, foreach); zero_grad(set_to_none=True).

Data and timing are hf_train.py's: rank r takes every world-th micro-batch of DATA in file order, labels =
input_ids shifted by one (HF's causal-LM convention: 4095 scored tokens a row); time = one whole optimizer
step between two torch.cuda.synchronize() calls; the report uses the median after --warmup; tokens/s are per
GPU; the peak memory is the largest over the ranks. "losses" is rank 0's own cross-entropy (what hf_train.py
writes), "global_losses" the mean over all ranks; "aux_losses" is NeMo's aux loss (mean over the MoE layers of
sum_i f_i P_i, f_i = load_i x E / (top_k x tokens)), a different normalisation from HF's aux_loss.
"""
import os
import sys
from pathlib import Path

# Before torch or transformers are imported: NeMo's transformers 5.18 must shadow the machine's 5.17.
NEMO_SITE = os.environ.get("NEMO_SITE", "/tmp/nemo-site")
if os.path.isdir(NEMO_SITE) and NEMO_SITE not in sys.path:
    sys.path.insert(0, NEMO_SITE)
os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_train import (Memory, add_job_arguments, add_step_statistics, load_batches,  # noqa: E402
                      parse_job_arguments, print_summary, record_failure, take_largest_peaks_over_ranks)
from model_flops import flops_per_token_from_folder  # noqa: E402

IGNORE_INDEX = -100


def import_nemo():
    """NeMo's modules, imported after the argument checks (the import takes seconds and logs)."""
    try:
        import nemo_automodel
        from nemo_automodel import NeMoAutoModelForCausalLM
        from nemo_automodel._transformers.auto_config import NeMoAutoConfig
        from nemo_automodel.components.distributed.init_utils import initialize_distributed
        from nemo_automodel.components.distributed.mesh_utils import get_flat_mesh
        from nemo_automodel.components.loss.masked_ce import MaskedCrossEntropy
        from nemo_automodel.components.models.common import BackendConfig
        from nemo_automodel.components.moe.load_balance_metrics import enable_load_balance_tracking
        from nemo_automodel.components.moe.megatron.moe_utils import MoEAuxLossAutoScaler
        from nemo_automodel.components.training.utils import (get_expert_tp_replication_factor,
                                                              scale_grads_and_clip_grad_norm)
        from nemo_automodel.recipes._dist_utils import create_distributed_setup_from_config
    except ImportError as e:
        raise SystemExit(f"nemo_train.py: cannot import NeMo AutoModel ({e}). Install the wheels of .whl/ with "
                         f"`python3 -m pip install --no-deps --target {NEMO_SITE} .whl/*.whl` "
                         "(scripts/gpu_nemo_bench.sh does) or set NEMO_SITE to where they are.")
    return argparse.Namespace(**{name: value for name, value in locals().items() if name != "e"})


def shifted_labels(input_ids: torch.Tensor) -> torch.Tensor:
    """HF's causal-LM labels: position t scores token t+1; the last position scores nothing."""
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[:, :-1] = input_ids[:, 1:]
    return labels


def backend(compile_attn: bool) -> dict:
    """NeMo's BackendConfig of the benchmark (the header says why)."""
    return dict(attn="sdpa", linear="torch", rms_norm="torch", rope_fusion=False, experts="torch_mm",
                dispatcher="torch", fake_balanced_gate=False, compile_attn=compile_attn)


def distributed(ep_size: int) -> dict:
    """The recipe's `distributed:` section, without activation checkpointing (HF runs none)."""
    return {"strategy": "fsdp2", "tp_size": 1, "cp_size": 1, "pp_size": 1, "ep_size": ep_size,
            "sequence_parallel": False, "activation_checkpointing": False, "moe": {"reshard_after_forward": False}}


def build_model(nemo, config, backend_options: dict, setup, dtype: torch.dtype):
    """NeMo's Qwen3-MoE, sharded by `setup`, with the weights of the folder `config` was read from."""
    torch.manual_seed(1234)  # only what NeMo initialises itself; the weights come from the folder
    return nemo.NeMoAutoModelForCausalLM.from_config(
        config, backend=nemo.BackendConfig(**backend_options), distributed_setup=setup, load_base_model=True,
        torch_dtype=dtype)


class NemoTrainStep:
    """One optimizer step as NeMo's train_ft recipe makes it, for one micro-batch per step and no PP/CP/TP."""

    def __init__(self, nemo, model, setup, params, lr: float, max_grad_norm: float, local_tokens: int):
        self.nemo, self.model, self.max_grad_norm = nemo, model, max_grad_norm
        mesh = setup.mesh_context
        self.device_mesh, self.moe_mesh = mesh.device_mesh, mesh.moe_mesh
        self.dp_size = nemo.get_flat_mesh(mesh.device_mesh, "dp").size()
        names = (self.moe_mesh.mesh_dim_names or ()) if self.moe_mesh is not None else ()
        self.ep_axis = "ep" if "ep" in names else None
        self.tp_replication = nemo.get_expert_tp_replication_factor([model], mesh.device_mesh)
        # Every rank's micro-batch has the same number of scored tokens (full rows, no padding).
        self.local_tokens = local_tokens
        self.global_tokens = local_tokens * self.dp_size
        nemo.enable_load_balance_tracking(model)
        self.gates = [m for m in model.modules() if getattr(m, "_track_load_balance", False)]
        # One micro-batch per optimizer step and no context parallelism: train_ft's aux-loss scale is 1.
        nemo.MoEAuxLossAutoScaler.main_loss_backward_scale = torch.tensor(1.0)
        self.loss_fn = nemo.MaskedCrossEntropy(fp32_upcast=True, ignore_index=IGNORE_INDEX, reduction="sum")
        self.optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                           foreach=True)

    def step(self, input_ids: torch.Tensor, labels: torch.Tensor):
        """Forward, backward, clipping, AdamW; returns the loss as trained (sum / all ranks' tokens) and the norm."""
        logits = self.model(input_ids)
        logits = getattr(logits, "logits", logits)
        loss = self.loss_fn(logits, labels, num_label_tokens=self.global_tokens)
        del logits  # as train_ft does: the full logits are not held through backward
        (loss * self.dp_size).backward()  # FSDP averages the gradients over the data-parallel ranks
        grad_norm = self.nemo.scale_grads_and_clip_grad_norm(
            self.max_grad_norm, [self.model], norm_type=2.0, pp_enabled=False, device_mesh=self.device_mesh,
            moe_mesh=self.moe_mesh, ep_axis_name=self.ep_axis, foreach=True, num_label_tokens=self.global_tokens,
            dp_group_size=self.dp_size, expert_tp_replication_factor=self.tp_replication)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach(), grad_norm

    def rank_and_global_loss(self, loss: torch.Tensor) -> tuple:
        """This rank's mean cross-entropy (what hf_train.py reports) and the mean over all ranks."""
        own = loss * (self.global_tokens / self.local_tokens)
        everyone = own.clone()
        torch.distributed.all_reduce(everyone)
        return own.item(), everyone.item() / torch.distributed.get_world_size()

    def aux_loss(self) -> float:
        """NeMo's aux loss of the last forward, averaged over the MoE layers."""
        layers = [g._last_aux_loss for g in self.gates if getattr(g, "_last_aux_loss", None) is not None]
        return torch.stack(layers).float().mean().item() if layers else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_job_arguments(parser)
    parser.add_argument("--ep-size", type=int, required=True, help="NeMo's ep_size (divides the world size)")
    parser.add_argument("--no-compile-attn", dest="compile_attn", action="store_false",
                        help="eager attention instead of NeMo's compile_attn")
    args = parse_job_arguments(parser)
    if not torch.cuda.is_available():
        raise SystemExit("nemo_train.py needs CUDA GPUs: NeMo AutoModel's Qwen3-MoE and FSDP2 set-up run on CUDA only")
    if "RANK" not in os.environ:
        raise SystemExit("nemo_train.py runs under torchrun: torchrun --nproc-per-node N bench/nemo_train.py ...")

    nemo = import_nemo()
    dist_env = nemo.initialize_distributed(backend="nccl", timeout_minutes=10)
    rank, world = dist_env.rank, dist_env.world_size
    if args.ep_size < 1 or world % args.ep_size:
        raise SystemExit(f"--ep-size {args.ep_size} must divide the world size {world}")
    device = f"cuda:{torch.cuda.current_device()}"

    label = args.label or f"NeMo AutoModel EP={args.ep_size} + FSDP2 x{world}"
    flops = flops_per_token_from_folder(args.model_dir, args.seq)
    tokens_per_step = args.micro_batch * args.seq
    backend_options = backend(args.compile_attn)
    distributed_options = distributed(args.ep_size)
    result = {"label": label, "runner": "nemo", "status": "running", "model_dir": str(args.model_dir),
              "data": str(args.data), "device": device, "device_name": torch.cuda.get_device_name(),
              "micro_batch": args.micro_batch, "seq": args.seq, "steps": args.steps, "warmup": args.warmup,
              "lr": args.lr, "max_grad_norm": args.max_grad_norm, "tokens_per_step": tokens_per_step, **flops,
              "ep_size": args.ep_size, "world_size": world, "nemo_backend": backend_options,
              "nemo_distributed": distributed_options, "loss_function": "MaskedCrossEntropy(fp32_upcast=True)",
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "nemo_automodel": getattr(nemo.nemo_automodel, "__version__", "?")}}
    if rank == 0:
        print(f"{label}: {flops['flops_per_token'] / 1e9:.3f} GFLOP per token "
              f"({flops['active_matmul_params'] / 1e6:.1f} M active matmul parameters); transformers "
              f"{transformers.__version__} from {Path(transformers.__file__).parent.parent}", flush=True)

    memory = Memory(device)
    step_seconds, losses, global_losses, aux_losses, grad_norms = [], [], [], [], []
    step = 0

    def write(status: str, **extra):
        result.update(status=status, completed_steps=len(step_seconds), step_seconds=step_seconds, losses=losses,
                      global_losses=global_losses, aux_losses=aux_losses, grad_norms=grad_norms,
                      **memory.summary(), **extra)
        add_step_statistics(result, step_seconds, args.warmup, tokens_per_step, flops["flops_per_token"])
        if status == "ok":
            take_largest_peaks_over_ranks(result, device)
        elif rank != 0:  # a failing rank reaches no collective: each writes what it knows, beside rank 0's
            result["rank"] = rank
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.with_suffix(f".rank{rank}.json").write_text(json.dumps(result, indent=1) + "\n")
        if rank == 0:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1) + "\n")

    try:
        batches = load_batches(args.data, args.micro_batch, args.seq, args.steps * world, device)[rank::world]
        start = time.perf_counter()
        setup = nemo.create_distributed_setup_from_config(distributed_options, world_size=world, timeout_minutes=10)
        config = nemo.NeMoAutoConfig.from_pretrained(str(args.model_dir))
        model = build_model(nemo, config, backend_options, setup, torch.bfloat16)
        result["load_seconds"] = time.perf_counter() - start
        result["model_class"] = f"{type(model).__module__}.{type(model).__qualname__}"
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        result["parameters"] = int(sum(p.numel() for p in params))  # global sizes: DTensors report the whole
        if any(p.dtype != torch.bfloat16 for p in params):
            raise RuntimeError("a parameter is not bf16")
        trainer = NemoTrainStep(nemo, model, setup, params, args.lr, args.max_grad_norm,
                                local_tokens=args.micro_batch * (args.seq - 1))
        for step, input_ids in enumerate(batches, 1):
            labels = shifted_labels(input_ids)
            torch.cuda.synchronize()
            begin = time.perf_counter()
            loss, grad_norm = trainer.step(input_ids, labels)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - begin
            memory.sample()
            step_seconds.append(seconds)
            # Outside the timed step: the rank's own mean, the mean over ranks, the aux loss, the norm.
            own, mean_over_ranks = trainer.rank_and_global_loss(loss)
            losses.append(own)
            global_losses.append(mean_over_ranks)
            aux_losses.append(trainer.aux_loss())
            grad_norms.append(float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm))
            if rank == 0:
                print(f"step {step}/{args.steps} | loss {losses[-1]:.4f} (all ranks {global_losses[-1]:.4f}) | "
                      f"aux {aux_losses[-1]:.4f} | grad norm {grad_norms[-1]:.3f} | {seconds:.3f} s | "
                      f"{tokens_per_step / seconds:.0f} tok/s", flush=True)
            del loss
    except Exception as e:  # noqa: BLE001 - the report must say what happened to every run
        return record_failure(write, e, step)

    write("ok")
    if rank == 0:
        print_summary(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
