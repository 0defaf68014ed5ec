#!/usr/bin/env python3
"""Builds nemotron_h_tiny, the whole-model fp32 parity fixture for the Nemotron-H family (NemotronHForCausalLM).

Config: V 96, H 32, five layers [mamba, moe, attention, mlp, moe] (every kind), 4 heads x 8 / 2 kv heads (no RoPE,
no biases), MLP width 24 (relu2), Mamba2 4 heads x 8 with 2 groups, state 8, conv kernel 3, chunk_size 4,
time_step_min 0.05, 8 experts top-2 in 2 groups (topk_group 1) of width 12, routed_scaling_factor 2.5, shared
expert 20, moe_latent_size 16 (latent MoE), mlp_bias false, untied (NemotronH never ties). Weights: transformers'
init, then A_log / D / dt_bias / the gated norm / e_score_correction_bias drawn at random so none is special.
  model.safetensors, config.json   save_pretrained's output (backbone.* names, one tensor per expert)
  expected.json                    num_parameters() and the versions (what `moetune inspect` must count)
  parity.safetensors, parity.json  as make_parity.py writes them (plain, padded, packed; 3 AdamW steps), names as
                                   transformers holds them in memory (model.*, experts stacked)

Packed documents: transformers' torch Mamba2 path ignores position_ids (the conv window and the SSM state run
across documents; docs/families/hf-nemotron-h.md). moetune restarts both at each document, so the packed case runs
every Mamba2 mixer on each document alone (the mixer's forward is wrapped to split the sequence at PACK_LENGTHS),
while attention gets its block-diagonal mask from position_ids with use_cache=False, as make_parity.py passes. The
script checks the packed logits equal each document run alone.

Run:  /work/refenv/bin/python tests/reference/make_nemotron_h_fixtures.py tests/fixtures
"""
import contextlib
import json
import sys
from pathlib import Path

import torch
from transformers import NemotronHConfig, NemotronHForCausalLM
from transformers.models.nemotron_h import modeling_nemotron_h

sys.path.insert(0, str(Path(__file__).parent))
import make_parity  # noqa: E402

NAME = "nemotron_h_tiny"
CONFIG = dict(
    architectures=["NemotronHForCausalLM"], vocab_size=96, hidden_size=32,
    layers_block_type=["mamba", "moe", "attention", "mlp", "moe"], num_attention_heads=4, num_key_value_heads=2,
    head_dim=8, intermediate_size=24, mamba_num_heads=4, mamba_head_dim=8, n_groups=2, ssm_state_size=8,
    conv_kernel=3, chunk_size=4, time_step_min=0.05, n_routed_experts=8, num_experts_per_tok=2, n_group=2,
    topk_group=1, moe_intermediate_size=12, moe_shared_expert_intermediate_size=20, moe_latent_size=16,
    routed_scaling_factor=2.5, norm_topk_prob=True, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
    eos_token_id=2, use_cache=False)


@contextlib.contextmanager
def mixer_per_document(mixer_class, lengths):
    """Every `mixer_class` module (a recurrent mixer whose torch path ignores position_ids) runs each document of a
    [1, sum(lengths)] row alone."""
    original = mixer_class.forward

    def split(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        assert hidden_states.shape[:2] == (1, sum(lengths)) and attention_mask is None
        pieces = hidden_states.split(list(lengths), dim=1)
        return torch.cat([original(self, p, cache_params=cache_params, **kwargs) for p in pieces], dim=1)

    mixer_class.forward = split
    try:
        yield
    finally:
        mixer_class.forward = original


def packed_forward_for(mixer_class):
    """make_parity.forward, with `mixer_class` run per document on the packed case's row."""
    def packed_forward(model, **kwargs):
        if "position_ids" in kwargs and kwargs["input_ids"].shape[1] == sum(make_parity.PACK_LENGTHS):
            with mixer_per_document(mixer_class, make_parity.PACK_LENGTHS):
                return make_parity.forward(model, **kwargs)
        return make_parity.forward(model, **kwargs)
    return packed_forward


def build(folder: Path):
    torch.manual_seed(make_parity.SEED)
    model = NemotronHForCausalLM(NemotronHConfig(**CONFIG)).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("A_log", "dt_bias", ".D")):
                p.copy_(torch.randn_like(p) * 0.5)
            elif name.endswith("mixer.norm.weight"):
                p.copy_(1.0 + torch.randn_like(p) * 0.2)
        for module in model.modules():
            if isinstance(module, modeling_nemotron_h.NemotronHTopkRouter):
                module.e_score_correction_bias.copy_(torch.randn_like(module.e_score_correction_bias) * 0.05)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    return model.num_parameters()


def check_packed_isolated(model, inputs, packed_forward):
    a = make_parity.PACK_LENGTHS[0]
    ids = inputs["input_ids"]
    with torch.no_grad():
        packed = packed_forward(model, input_ids=ids, position_ids=inputs["position_ids"]).logits
        first = make_parity.forward(model, input_ids=ids[:, :a]).logits
        second = make_parity.forward(model, input_ids=ids[:, a:]).logits
    diff = max((packed[:, :a] - first).abs().max().item(), (packed[:, a:] - second).abs().max().item())
    assert diff <= 1e-5, f"packed documents not isolated: {diff}"
    return diff


def write_fixture(folder: Path, name: str, architecture: str, count: int, mixer_class, coef=None):
    """The parity files and expected.json for a saved fp32 model whose `mixer_class` runs per document when packed."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    packed_forward = packed_forward_for(mixer_class)
    model = make_parity.load(folder, "eager")
    inputs = make_parity.make_inputs(model.config.vocab_size)
    diff = check_packed_isolated(model, inputs["packed"], packed_forward)
    out = {}
    stats = {case: make_parity.run_case(model, case, inputs[case], out, forward=packed_forward)
             for case in ("plain", "padded", "packed")}
    out["plain.lm_loss_sum20"] = make_parity.lm_loss_sum20(model, inputs["plain"])
    losses = make_parity.train(folder, "eager", inputs["plain"], out)
    make_parity.save_file(out, folder / "parity.safetensors", metadata={"format": "pt"})
    meta = {
        "made_with": {"torch": torch.__version__, "transformers": make_parity.transformers.__version__},
        "adamw": make_parity.ADAMW, "max_grad_norm": make_parity.MAX_GRAD_NORM,
        "schedule": {"type": "linear", "warmup_steps": make_parity.WARMUP_STEPS,
                     "total_steps": make_parity.TOTAL_STEPS},
        "train_steps": make_parity.TRAIN_STEPS, "router_aux_loss_coef": coef,
        "cases": ["plain", "padded", "packed", "train"], "attn_implementation": "eager",
        "packed_documents_isolated": True, "packed_mamba": "each document alone (see the script)",
        "seed": make_parity.SEED, "pad_token_id": make_parity.PAD_ID, "num_parameters": count,
    }
    (folder / "parity.json").write_text(json.dumps(meta, indent=2) + "\n")
    expected = {"num_parameters": count, "architecture": architecture, "dtype": "float32",
                "made_with": meta["made_with"]}
    (folder / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    print(f"{name}: {count} parameters; packed max diff {diff:.2g}; losses "
          + "/".join(f"{stats[c]['loss']:.6f}" for c in ("plain", "padded", "packed"))
          + "; train " + "/".join(f"{x:.6f}" for x in losses))


def main(root: Path):
    folder = root / NAME
    count = build(folder)
    write_fixture(folder, NAME, "NemotronHForCausalLM", count, modeling_nemotron_h.NemotronHMamba2Mixer)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"))
