#!/usr/bin/env python3
"""Writes the training-parity fixtures the C++ tests compare moetune against (1e-5 relative error).

For each fp32 fixture folder made by make_fixtures.py (qwen3_moe_tiny, qwen3_moe_tied_f32, qwen3_f32,
llama_tiny, mixtral_tiny, qwen2_moe_tiny) this loads the saved checkpoint with transformers (fp32, eager
attention, eval mode so there is no dropout, gradients on) and writes into that folder:

  parity.safetensors   fp32 float tensors, int64 integer tensors, scalars as 0-dim tensors:
    plain.*   input_ids [2,8] (seeded, values in [0,V)), labels (= input_ids), logits [2,8,V],
              loss (what transformers returns: CE + router_aux_loss_coef * aux_loss for MoE),
              lm_loss (CE alone), aux_loss (MoE only), lm_loss_sum20 (CE with num_items_in_batch=20,
              i.e. summed CE / 20), grad.<param> (gradient of `loss` for every named parameter).
    padded.*  input_ids [2,8] (values in [1,V); row 1's last 3 positions set to pad id 0),
              attention_mask [2,8] (0 on those pads), labels (-100 where attention_mask == 0),
              logits, loss, lm_loss, aux_loss (MoE), grad.<param>.
    packed.*  input_ids [1,12] holding two documents of 7 and 5 tokens, position_ids [1,12] =
              [0..6, 0..4], labels (= input_ids, but -100 at the first token of the second document),
              logits, loss, lm_loss, aux_loss (MoE), grad.<param>. No attention_mask: transformers
              derives the block-diagonal causal mask from position_ids (asserted below).
    train.*   3 AdamW steps on the plain batch from the saved weights with a linear warmup schedule and
              grad-norm clipping: losses [3], grad_norms [3] (pre-clip norms from clip_grad_norm_),
              lrs [3] (the lr each step used; note the linear warmup makes step 0's lr 0), and
              param.<param> (every parameter after the 3 steps).
  parity.json          the optimizer / schedule hyperparameters, router_aux_loss_coef and versions.

Parameter names are those of model.named_parameters(), i.e. transformers v5's in-memory names: MoE experts
stay fused (mlp.experts.gate_up_proj [E,2I,H], mlp.experts.down_proj [E,H,I]; the checkpoint holds
per-expert gate_proj = gate_up_proj[e,:I], up_proj = gate_up_proj[e,I:], down_proj = down_proj[e]).
With tied embeddings only model.embed_tokens.weight appears (its gradient includes the head's).

Every forward passes use_cache=False (training setup; without it transformers 5.17 builds a KV cache and
then ignores the packing in position_ids). MoE forwards pass output_router_logits=True. lm_loss is recomputed with the model's own loss_function on
the returned logits and checked against out.loss - coef * out.aux_loss.

Run:  /work/refenv/bin/python tests/reference/make_parity.py tests/fixtures [fixture names...]   (default: all)
Needs torch and transformers v5 (versions recorded in parity.json). Deterministic: fixed seeds, one thread.
"""
import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, get_linear_schedule_with_warmup

FIXTURES = ["qwen3_moe_tiny", "qwen3_moe_tied_f32", "qwen3_f32", "llama_tiny", "mixtral_tiny", "qwen2_moe_tiny",
            "deepseek_v3_tiny", "deepseek_v3_qproj_tied", "deepseek_v3_pad_nulls", "glm4_moe_tiny", "glm4_moe_quarter_tied",
            "glm4_moe_lite_tiny", "qwen3_sliding_yarn", "mixtral_sliding_dynamic", "qwen2_tiny", "mistral_tiny", "phi3_tiny", "phi4_mini_tiny", "smollm3_tiny", "olmoe_tiny", "minimax_m2_tiny",
            "deepseek_v2_tiny", "deepseek_v2_grouped", "dots1_tiny", "olmo2_tiny", "olmo3_tiny",
            "exaone4_tiny", "solar_open_tiny", "flex_olmo_tiny",
            "exaone_moe_tiny", "gemma3_tiny", "gemma_tiny", "ernie4_5_moe_tiny", "granitemoeshared_tiny"]
SEED = 20240531
PAD_ID = 0
ADAMW = {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}
MAX_GRAD_NORM = 0.5
WARMUP_STEPS = 1  # step 0 runs at lr 0 (as in transformers); steps 1 and 2 move the weights
TOTAL_STEPS = 10
TRAIN_STEPS = 3
PACK_LENGTHS = (7, 5)


def record_granite_router_logits(model) -> None:
    """transformers 5.17's GraniteMoe models compute the load-balancing loss from outputs.router_logits but never
    record them (their _can_record_outputs lacks the router, as Mixtral's has it, and the causal LM does not ask its
    model for them), so output_router_logits=True with labels fails there ('int' object has no attribute 'to').
    Restores both — the router's third output, its logits — so transformers' own loss runs as its code means it to."""
    from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY, OutputRecorder
    for module in model.modules():
        name = type(module).__name__
        if name.startswith("GraniteMoe") and name.endswith("TopKRouter"):
            key = str(type(model.model))  # the registry post_init filled, which the capturing hooks read
            _CAN_RECORD_REGISTRY[key] = dict(_CAN_RECORD_REGISTRY.get(key) or {},
                                             router_logits=OutputRecorder(type(module), index=2))
            # ...and the causal LM does not pass output_router_logits down to its model (Mixtral's does).
            inner_forward = model.model.forward
            model.model.forward = lambda *args, **kwargs: inner_forward(*args, **{"output_router_logits": True, **kwargs})
            return


def load(folder: Path, attn: str):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation=attn)
    record_granite_router_logits(model)
    model.eval()  # no dropout in these models anyway; gradients stay enabled
    for p in model.parameters():
        assert p.dtype == torch.float32, p.dtype
        p.requires_grad_(True)
    return model


# MoE families whose load-balancing loss moetune refuses (MiniMax-M2's takes a softmax top-k of its sigmoid router's
# logits; ERNIE 4.5's ranks the unbiased probabilities while its layers route by the biased ones): their fixtures are
# made without it, as their configs train by default (output_router_logits false).
WITHOUT_AUX_LOSS = {"minimax_m2", "ernie4_5_moe"}


def is_moe(model) -> bool:
    # num_local_experts without the num_experts alias: GraniteMoe's configs.
    experts = hasattr(model.config, "num_experts") or hasattr(model.config, "num_local_experts")
    return (hasattr(model.config, "router_aux_loss_coef") and experts
            and model.config.model_type not in WITHOUT_AUX_LOSS)


def forward(model, **kwargs):
    # use_cache=False matters: with the default (config.use_cache=True) the model builds a DynamicCache before
    # making the mask, and transformers only derives packed-document masks from position_ids when
    # past_key_values is None; with a cache the packed row gets a plain causal mask (documents not isolated).
    kwargs["use_cache"] = False
    if is_moe(model):
        kwargs["output_router_logits"] = True
    return model(**kwargs)


def scalar(t) -> torch.Tensor:
    return torch.as_tensor(t).detach().to(torch.float32).reshape(()).clone()


def make_inputs(vocab: int, seed: int = SEED) -> dict:
    g = torch.Generator().manual_seed(seed)
    plain_ids = torch.randint(0, vocab, (2, 8), generator=g, dtype=torch.int64)
    padded_ids = torch.randint(1, vocab, (2, 8), generator=g, dtype=torch.int64)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, -3:] = 0
    padded_ids[1, -3:] = PAD_ID
    n = sum(PACK_LENGTHS)
    packed_ids = torch.randint(1, vocab, (1, n), generator=g, dtype=torch.int64)
    position_ids = torch.cat([torch.arange(k, dtype=torch.int64) for k in PACK_LENGTHS]).unsqueeze(0)
    packed_labels = packed_ids.clone()
    packed_labels[0, PACK_LENGTHS[0]] = -100  # no prediction across the document boundary
    padded_labels = padded_ids.masked_fill(mask == 0, -100)
    return {
        "plain": dict(input_ids=plain_ids, labels=plain_ids.clone()),
        "padded": dict(input_ids=padded_ids, attention_mask=mask, labels=padded_labels),
        "packed": dict(input_ids=packed_ids, position_ids=position_ids, labels=packed_labels),
    }


def run_case(model, name: str, inputs: dict, out: dict, forward=forward) -> dict:
    """One forward + backward; stores inputs, logits, losses and grads under `name.`."""
    model.zero_grad(set_to_none=True)
    res = forward(model, **inputs)
    res.loss.backward()
    for k, v in inputs.items():
        out[f"{name}.{k}"] = v.clone()
    out[f"{name}.logits"] = res.logits.detach().float().contiguous()
    out[f"{name}.loss"] = scalar(res.loss)
    with torch.no_grad():
        lm = model.loss_function(res.logits, inputs["labels"], model.config.vocab_size)
    out[f"{name}.lm_loss"] = scalar(lm)
    if is_moe(model):
        coef = model.config.router_aux_loss_coef
        out[f"{name}.aux_loss"] = scalar(res.aux_loss)
        split = res.loss.detach() - coef * res.aux_loss.detach()
        assert torch.allclose(split, lm, rtol=1e-6, atol=1e-6), (name, split.item(), lm.item())
    else:
        assert torch.allclose(res.loss.detach(), lm, rtol=0, atol=0), (name, res.loss.item(), lm.item())
    for pname, p in model.named_parameters():
        if p.grad is None and pname.endswith("e_score_correction_bias"):
            continue  # ERNIE 4.5's moe_statics holds it as an nn.Parameter; it only chooses, so no gradient reaches it
        assert p.grad is not None, f"{name}: no gradient for {pname}"
        out[f"{name}.grad.{pname}"] = p.grad.detach().float().contiguous().clone()
    model.zero_grad(set_to_none=True)
    return {"loss": res.loss.item(), "lm_loss": lm.item(),
            "aux_loss": res.aux_loss.item() if is_moe(model) else None}


def lm_loss_sum20(model, inputs: dict, forward=forward) -> torch.Tensor:
    with torch.no_grad():
        res = forward(model, **inputs, num_items_in_batch=20)
        ce = res.loss - model.config.router_aux_loss_coef * res.aux_loss if is_moe(model) else res.loss
        # Check transformers did what we expect: summed CE over the shifted labels, divided by 20.
        shift_logits = res.logits[:, :-1].reshape(-1, res.logits.shape[-1]).float()
        shift_labels = inputs["labels"][:, 1:].reshape(-1)
        want = torch.nn.functional.cross_entropy(shift_logits, shift_labels, ignore_index=-100,
                                                 reduction="sum") / 20
        assert torch.allclose(ce, want, rtol=1e-5, atol=1e-6), (ce.item(), want.item())
    return scalar(ce)


def packed_isolated(model, inputs: dict) -> float:
    """Max |packed logits of document 2 - logits of document 2 run alone|."""
    a = PACK_LENGTHS[0]
    with torch.no_grad():
        packed = forward(model, input_ids=inputs["input_ids"], position_ids=inputs["position_ids"]).logits
        alone = forward(model, input_ids=inputs["input_ids"][:, a:]).logits
        first = forward(model, input_ids=inputs["input_ids"][:, :a]).logits
    return max((packed[:, a:] - alone).abs().max().item(), (packed[:, :a] - first).abs().max().item())


def train(folder: Path, attn: str, inputs: dict, out: dict, forward=forward, adamw=ADAMW) -> list:
    torch.manual_seed(SEED)
    model = load(folder, attn)
    opt = torch.optim.AdamW(model.parameters(), lr=adamw["lr"], betas=tuple(adamw["betas"]),
                            eps=adamw["eps"], weight_decay=adamw["weight_decay"])
    sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=WARMUP_STEPS, num_training_steps=TOTAL_STEPS)
    losses, norms, lrs = [], [], []
    for _ in range(TRAIN_STEPS):
        res = forward(model, **inputs)
        res.loss.backward()
        total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=MAX_GRAD_NORM)
        lrs.append(sched.get_last_lr()[0])
        losses.append(res.loss.item())
        norms.append(total_norm.item())
        opt.step()
        sched.step()
        opt.zero_grad()
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    out["train.lrs"] = torch.tensor(lrs, dtype=torch.float32)
    for pname, p in model.named_parameters():
        out[f"train.param.{pname}"] = p.detach().float().contiguous().clone()
    return losses


def make(root: Path, name: str) -> None:
    folder = root / name
    torch.manual_seed(SEED)
    attn = "eager"
    model = load(folder, attn)
    inputs = make_inputs(model.config.vocab_size)

    diff = packed_isolated(model, inputs["packed"])
    if diff > 1e-5:
        print(f"{name}: eager attention does not isolate packed documents (max diff {diff:.3g}), trying sdpa")
        sdpa = load(folder, "sdpa")
        diff_sdpa = packed_isolated(sdpa, inputs["packed"])
        if diff_sdpa <= 1e-5:
            attn, model, diff = "sdpa", sdpa, diff_sdpa
        else:
            print(f"{name}: WARNING sdpa does not isolate packed documents either (max diff {diff_sdpa:.3g});"
                  " storing what transformers computes")
    packed_ok = diff <= 1e-5

    out = {}
    stats = {case: run_case(model, case, inputs[case], out) for case in ("plain", "padded", "packed")}
    out["plain.lm_loss_sum20"] = lm_loss_sum20(model, inputs["plain"])
    losses = train(folder, attn, inputs["plain"], out)

    assert all(v.dtype in (torch.float32, torch.int64) for v in out.values())
    save_file(out, folder / "parity.safetensors", metadata={"format": "pt"})
    coef = getattr(model.config, "router_aux_loss_coef", None) if is_moe(model) else None
    meta = {
        "made_with": {"torch": torch.__version__, "transformers": transformers.__version__},
        "adamw": ADAMW,
        "max_grad_norm": MAX_GRAD_NORM,
        "schedule": {"type": "linear", "warmup_steps": WARMUP_STEPS, "total_steps": TOTAL_STEPS},
        "train_steps": TRAIN_STEPS,
        "router_aux_loss_coef": coef,
        "cases": ["plain", "padded", "packed", "train"],
        "attn_implementation": attn,
        "packed_documents_isolated": packed_ok,
        "seed": SEED,
        "pad_token_id": PAD_ID,
    }
    (folder / "parity.json").write_text(json.dumps(meta, indent=2) + "\n")

    back = load_file(folder / "parity.safetensors")
    assert back.keys() == out.keys() and all(torch.equal(back[k], out[k]) for k in out)
    size = (folder / "parity.safetensors").stat().st_size
    def join(key):
        return "/".join(f"{stats[c][key]:.6f}" for c in ("plain", "padded", "packed"))
    aux = "" if coef is None else f" aux {join('aux_loss')}"
    train_str = "/".join(f"{x:.6f}" for x in losses)
    print(f"{name}: attn={attn} packed_isolated={packed_ok} (max diff {diff:.2g}); plain/padded/packed "
          f"loss {join('loss')} lm {join('lm_loss')}{aux}; sum20 {out['plain.lm_loss_sum20'].item():.6f}; "
          f"train losses {train_str}; {len(out)} tensors, {size} bytes")


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out_root = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
    names = sys.argv[2:] or FIXTURES
    unknown = [n for n in names if n not in FIXTURES]
    assert not unknown, f"unknown fixtures {unknown}; known: {FIXTURES}"
    for fixture in names:
        make(out_root, fixture)
