#!/usr/bin/env python3
"""Builds the GPT-OSS fixtures (GptOssForCausalLM) the C++ tests check moetune against.

gpt_oss_tiny (fp32): V 96, H 32, 2 layers (layer 0 sliding_attention with window 4, layer 1 full_attention),
4 heads x 8, 2 kv heads, 4 experts (top-2) of width 16, YaRN RoPE as gpt-oss ships it (factor 32, theta 150000,
beta 32/1, truncate false, original 4096), attention biases and sinks, router bias, expert biases, untied,
router_aux_loss_coef 0.01, output_router_logits. The expert gate/up biases are drawn wide (std 4) so that the
clamped SwiGLU's limit (7) cuts some gate and up values, in both directions.
  model.safetensors, config.json   save_pretrained's output
  reference.safetensors            input_ids [1,8] and transformers' logits (as make_fixtures.py writes them)
  expected.json                    num_parameters() and the versions
  parity.safetensors, parity.json  as make_parity.py writes them, with its functions (plain, padded, packed
                                   cases; 3 AdamW steps, here at lr 1e-5), with one difference, see below.

Packed documents: GptOssModel.forward (5.17) builds its masks without position_ids, so a packed row given only
position_ids gets a plain causal mask and its documents see each other (unlike Qwen3-MoE, Mixtral, Llama, whose
models pass position_ids and get block-diagonal masks). moetune isolates documents, as transformers does for the
other families and as its flash-attention path does from position_ids. The packed case therefore runs GptOssModel with
its two mask builders (create_causal_mask, create_sliding_window_causal_mask) called with position_ids, as the
other families call them; the script checks those logits equal each document run alone. The attention is transformers' eager_attention_forward (GPT-OSS has no SDPA path), sinks included.

gpt_oss_mxfp4_tiny (bf16 non-expert weights, MXFP4 experts as the released checkpoints store them): V 96, H 64,
1 full-attention layer, 4 experts of width 32 (K must be a multiple of 32). The experts' bf16 weights are
quantized here by the format's definition (OCP MX: per 32 values along the input dimension one E8M0 scale,
2^(floor(log2 max|x|) - 2), and E2M1 codes rounded to nearest, low nibble = even index), written as
mlp.experts.{gate_up,down}_proj_{blocks,scales}; a few scales are forced to extremes (1, 127, 200) and a few codes
to -0. transformers (CPU: always its dequantizing path, integrations/mxfp4.py) loads it and the script stores:
  dequantized.safetensors  transformers' dequantized bf16 gate_up_proj [E,H,2I] / down_proj [E,I,H] per layer
  reference.safetensors    input_ids [1,8] and transformers' logits from the dequantized weights in fp32
  saved_layout.json        name -> [dtype, shape] of what save_pretrained writes for this model in bf16 (what
                           moetune writes back), whether transformers' config.json keeps quantization_config after
                           a dequantizing load (it drops it), and the keys transformers 5.17 writes when it saves
                           the dequantized model itself (broken: "gate_up_proj$", "down_proj$", no layer prefix)

Run:  /work/refenv/bin/python tests/reference/make_gpt_oss_fixtures.py tests/fixtures
"""
import contextlib
import functools
import json
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GptOssConfig
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.models.gpt_oss import modeling_gpt_oss

sys.path.insert(0, str(Path(__file__).parent))
from make_parity import (MAX_GRAD_NORM, PACK_LENGTHS, PAD_ID, SEED, TOTAL_STEPS, TRAIN_STEPS,  # noqa: E402
                         WARMUP_STEPS, lm_loss_sum20, load, make_inputs, run_case, train)

VOCAB = 96
ADAMW = {"lr": 1e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}  # make_parity.py's, at lr 1e-5
MIN_ROUTING_GAP = 0.05  # see smallest_routing_gap
YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": False, "original_max_position_embeddings": 4096}


def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__}


# ---------------------------------------------------------------------------------------------- gpt_oss_tiny

def tiny_config() -> GptOssConfig:
    config = GptOssConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        max_position_embeddings=131072, rope_parameters=dict(YARN), tie_word_embeddings=False,
        output_router_logits=True, router_aux_loss_coef=0.01)
    config.architectures = ["GptOssForCausalLM"]
    return config


@contextlib.contextmanager
def masks_from_position_ids(position_ids):
    """GptOssModel's mask builders, called with the packed row's position_ids as the other families call them."""
    saved = modeling_gpt_oss.create_causal_mask, modeling_gpt_oss.create_sliding_window_causal_mask
    modeling_gpt_oss.create_causal_mask = functools.partial(create_causal_mask, position_ids=position_ids)
    modeling_gpt_oss.create_sliding_window_causal_mask = functools.partial(create_sliding_window_causal_mask,
                                                                           position_ids=position_ids)
    try:
        yield
    finally:
        modeling_gpt_oss.create_causal_mask, modeling_gpt_oss.create_sliding_window_causal_mask = saved


def forward(model, **kwargs):
    kwargs["use_cache"] = False
    kwargs["output_router_logits"] = True
    if "position_ids" not in kwargs:
        return model(**kwargs)
    with masks_from_position_ids(kwargs["position_ids"]):
        return model(**kwargs)


def packed_isolation_error(model, inputs: dict) -> tuple[float, float]:
    """Max |packed logits - each document run alone|, with the position_ids masks and with GptOssModel's own."""
    a = PACK_LENGTHS[0]
    ids, pos = inputs["input_ids"], inputs["position_ids"]
    with torch.no_grad():
        alone = torch.cat([model(input_ids=ids[:, :a], use_cache=False).logits,
                           model(input_ids=ids[:, a:], use_cache=False).logits], dim=1)
        isolated = forward(model, input_ids=ids, position_ids=pos).logits
        own = model(input_ids=ids, position_ids=pos, use_cache=False).logits
    return (isolated - alone).abs().max().item(), (own - alone).abs().max().item()


def smallest_routing_gap(model, inputs: dict) -> float:
    """Over every case's tokens and layers, the smallest gap between the k-th and (k+1)-th router logits.

    A bf16 run (the GPU engine, transformers in bf16) perturbs router logits by ~1e-2; at a smaller gap it may pick
    another expert than fp32 did, and its gradients then differ by far more than bf16 noise (measured: a 0.005 gap
    in the first gpt_oss_tiny plain batch flipped on the H200 and put layer 0's k_proj gradients 0.2-0.3 off)."""
    logits = []
    hooks = [layer.mlp.router.register_forward_hook(lambda module, args, out: logits.append(out[0].detach()))
             for layer in model.model.layers]
    try:
        with torch.no_grad():
            for case in inputs.values():
                forward(model, **{k: v for k, v in case.items() if k != "labels"})
    finally:
        for hook in hooks:
            hook.remove()
    k = model.config.num_experts_per_tok
    ranked = [torch.sort(l.float(), dim=-1, descending=True).values for l in logits]
    return min((r[:, k - 1] - r[:, k]).min().item() for r in ranked)


def inputs_without_routing_near_ties(model) -> tuple[dict, int, float]:
    """make_parity's inputs from the first seed (SEED, SEED+1, ...) whose routing has no near-tie in any case."""
    for seed in range(SEED, SEED + 100):
        inputs = make_inputs(VOCAB, seed)
        gap = smallest_routing_gap(model, inputs)
        if gap >= MIN_ROUTING_GAP:
            return inputs, seed, gap
    raise RuntimeError(f"no seed in [{SEED}, {SEED + 100}) gives router gaps >= {MIN_ROUTING_GAP}")


def window_matters(model, inputs: dict) -> float:
    """Max |logits with sliding_window 4 - with the window as long as the sequence| on the plain batch."""
    with torch.no_grad():
        windowed = forward(model, **{k: v for k, v in inputs.items() if k != "labels"}).logits
        model.config.sliding_window = 64
        for layer in model.model.layers:
            if layer.self_attn.sliding_window is not None:
                layer.self_attn.sliding_window = 64
        unwindowed = forward(model, **{k: v for k, v in inputs.items() if k != "labels"}).logits
        model.config.sliding_window = 4
        for layer in model.model.layers:
            if layer.self_attn.sliding_window is not None:
                layer.self_attn.sliding_window = 4
    return (windowed - unwindowed).abs().max().item()


def clamp_fraction(model, inputs: dict) -> tuple[float, float]:
    """Fractions of expert gate values above 7 and of up values outside [-7, 7] on the plain batch."""
    seen = {"gate": [], "up": []}
    originals = []
    for layer in model.model.layers:
        experts = layer.mlp.experts
        original = experts._apply_gate

        def recording(gate_up, experts=experts, original=original):
            seen["gate"].append((gate_up[..., ::2] > experts.limit).float().mean().item())
            seen["up"].append((gate_up[..., 1::2].abs() > experts.limit).float().mean().item())
            return original(gate_up)

        originals.append((experts, original))
        experts._apply_gate = recording
    with torch.no_grad():
        forward(model, **{k: v for k, v in inputs.items() if k != "labels"})
    for experts, original in originals:
        experts._apply_gate = original
    return sum(seen["gate"]) / len(seen["gate"]), sum(seen["up"]) / len(seen["up"])


def make_tiny(root: Path) -> None:
    folder = root / "gpt_oss_tiny"
    torch.manual_seed(1234)
    config = tiny_config()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Wide gate/up biases so the clamp at 7 bites; everything else as make_fixtures.py draws it.
            std = 4.0 if name.endswith("gate_up_proj_bias") else 0.5
            p.copy_(torch.randn_like(p) * std)
    model.save_pretrained(folder)

    input_ids = torch.tensor([[3, 17, 42, 5, 88, 9, 61, 27]], dtype=torch.int64)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=input_ids, use_cache=False).logits.float()
    save_file({"input_ids": input_ids, "logits": logits.contiguous()}, folder / "reference.safetensors",
              metadata={"format": "pt"})
    expected = {"num_parameters": model.num_parameters(), "architecture": "GptOssForCausalLM", "dtype": "float32",
                "made_with": versions()}
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")

    torch.manual_seed(SEED)
    model = load(folder, "eager")
    inputs, input_seed, routing_gap = inputs_without_routing_near_ties(model)
    isolated, own = packed_isolation_error(model, inputs["packed"])
    assert isolated <= 1e-5, f"the position_ids masks do not isolate the documents ({isolated})"
    window = window_matters(model, inputs["plain"])
    assert window > 1e-3, f"sliding_window 4 changes nothing on a sequence of 8 ({window})"
    gate_clamped, up_clamped = clamp_fraction(model, inputs["plain"])
    assert gate_clamped > 0 and up_clamped > 0, (gate_clamped, up_clamped)

    out = {}
    stats = {case: run_case(model, case, inputs[case], out, forward) for case in ("plain", "padded", "packed")}
    out["plain.lm_loss_sum20"] = lm_loss_sum20(model, inputs["plain"], forward)
    losses = train(folder, "eager", inputs["plain"], out, forward, ADAMW)
    save_file(out, folder / "parity.safetensors", metadata={"format": "pt"})
    meta = {
        "made_with": versions(), "adamw": ADAMW, "max_grad_norm": MAX_GRAD_NORM,
        "schedule": {"type": "linear", "warmup_steps": WARMUP_STEPS, "total_steps": TOTAL_STEPS},
        "train_steps": TRAIN_STEPS, "router_aux_loss_coef": config.router_aux_loss_coef,
        "cases": ["plain", "padded", "packed", "train"], "attn_implementation": "eager",
        "packed_documents_isolated": True,
        "packed_masks": "GptOssModel's create_causal_mask / create_sliding_window_causal_mask called with "
                        "position_ids (it does not pass them itself)",
        "packed_cross_document_error_without_masks": own, "window_effect_on_plain_logits": window,
        "clamped_fraction": {"gate": gate_clamped, "up": up_clamped}, "seed": input_seed, "pad_token_id": PAD_ID,
        "smallest_routing_gap": routing_gap,
    }
    (folder / "parity.json").write_text(json.dumps(meta, indent=2) + "\n")
    join = lambda key: "/".join(f"{stats[c][key]:.6f}" for c in ("plain", "padded", "packed"))  # noqa: E731
    print(f"gpt_oss_tiny: {expected['num_parameters']} parameters; loss {join('loss')} aux {join('aux_loss')}; "
          f"train {losses}; window effect {window:.3g}; packed without masks off by {own:.3g}; "
          f"clamped gate {gate_clamped:.3f} up {up_clamped:.3f}; inputs seed {input_seed}, routing gap {routing_gap:.3f}; "
          f"parity {(folder / 'parity.safetensors').stat().st_size} bytes")


# ---------------------------------------------------------------------------------------- gpt_oss_mxfp4_tiny

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize_mxfp4(w: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """w [E, rows, K] (rows = output features, K = input features) -> blocks [E, rows, K/32, 16], scales."""
    E, rows, K = w.shape
    blocks32 = w.float().reshape(E, rows, K // 32, 32)
    amax = blocks32.abs().amax(-1)
    # OCP MX: shared exponent floor(log2(amax)) - emax(E2M1) = ... - 2, so amax / 2^e lies in [4, 8).
    exponent = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp_min(2.0 ** -126))) - 2, torch.zeros_like(amax))
    scales = (exponent + 127).clamp(0, 254).to(torch.uint8)
    # A few extreme scales, so that dequantization meets subnormal and large powers of two.
    flat = scales.view(-1)
    picks = torch.randperm(flat.numel(), generator=g)[:3]
    flat[picks[0]], flat[picks[1]], flat[picks[2]] = 1, 127, 200
    scaled = blocks32 / torch.pow(2.0, scales.float() - 127).unsqueeze(-1)
    magnitude = scaled.abs().clamp_max(6.0)
    # Nearest E2M1 magnitude (ties to the lower code, the even one, as round-half-to-even does for these values).
    code = (magnitude.unsqueeze(-1) - E2M1).abs().argmin(-1)
    code = code | torch.where(scaled < 0, 8, 0)
    codes = code.to(torch.uint8).view(-1)
    minus_zero = torch.randperm(codes.numel(), generator=g)[:4]
    codes[minus_zero] = 8  # -0.0
    code = codes.view(E, rows, K // 32, 32)
    packed = (code[..., 0::2] | (code[..., 1::2] << 4)).to(torch.uint8)  # low nibble = even index
    return packed.contiguous(), scales.contiguous()


def make_mxfp4(root: Path) -> None:
    folder = root / "gpt_oss_mxfp4_tiny"
    torch.manual_seed(4321)
    g = torch.Generator().manual_seed(4321)
    config = GptOssConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        layer_types=["full_attention"], max_position_embeddings=131072, rope_parameters=dict(YARN),
        tie_word_embeddings=False)
    config.architectures = ["GptOssForCausalLM"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.randn(p.shape, generator=g) * 0.5).to(p.dtype))
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        plain = load_file(Path(tmp) / "model.safetensors")
        saved_config = json.loads((Path(tmp) / "config.json").read_text())
    tensors = {}
    for name, t in plain.items():
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            # bf16 layout [E, in, out] -> the quantized layout's [E, out, in].
            blocks, scales = quantize_mxfp4(t.transpose(1, 2), g)
            tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
        else:
            tensors[name] = t
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    saved_config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"]}
    (folder / "config.json").write_text(json.dumps(saved_config, indent=2) + "\n")

    loaded = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    state = loaded.state_dict()
    reference = {}
    for name in plain:
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            dequantized = state[name]
            assert dequantized.dtype == torch.bfloat16, dequantized.dtype
            reference[name] = dequantized.contiguous()
    save_file(reference, folder / "dequantized.safetensors", metadata={"format": "pt"})
    # In fp32 throughout, as moetune's CPU engine computes: a dequantizing load keeps the experts bf16 whatever
    # dtype asks for, so the model is upcast after loading (same values, fp32 arithmetic).
    fp32 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").float().eval()
    input_ids = torch.tensor([[3, 17, 42, 5, 88, 9, 61, 27]], dtype=torch.int64)
    with torch.no_grad():
        logits = fp32(input_ids=input_ids, use_cache=False).logits.contiguous()
    save_file({"input_ids": input_ids, "logits": logits}, folder / "reference.safetensors", metadata={"format": "pt"})

    # What moetune must write back: the layout save_pretrained writes for the same model in bf16 (`plain`).
    # Saving the dequantized model itself is broken in transformers 5.17: its keys come out as the weight
    # converter's target patterns ("gate_up_proj$", "down_proj$"), without the layer prefix; recorded here.
    with tempfile.TemporaryDirectory() as tmp:
        loaded.save_pretrained(tmp)
        with safe_open(Path(tmp) / "model.safetensors", "pt") as f:
            broken_keys = sorted(k for k in f.keys() if not k.startswith(("model.", "lm_head.")))
        resaved_config = json.loads((Path(tmp) / "config.json").read_text())
    layout = {name: [str(t.dtype).replace("torch.", ""), list(t.shape)] for name, t in sorted(plain.items())}
    (folder / "saved_layout.json").write_text(json.dumps(
        {"tensors": layout, "config_has_quantization_config": "quantization_config" in resaved_config,
         "transformers_dequantized_save_keys_outside_model": broken_keys, "made_with": versions()}, indent=1) + "\n")
    expected = {"num_parameters": loaded.num_parameters(), "architecture": "GptOssForCausalLM", "dtype": "bfloat16",
                "made_with": versions()}
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    print(f"gpt_oss_mxfp4_tiny: {expected['num_parameters']} parameters; saved layout {len(layout)} tensors, "
          f"quantization_config kept on save: {'quantization_config' in resaved_config}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out_root = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
    make_tiny(out_root)
    make_mxfp4(out_root)
