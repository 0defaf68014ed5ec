#!/usr/bin/env python3
"""Builds the Mamba2 mixer fixture: transformers' NemotronHMamba2Mixer (its torch path, training mode, no cache)
on a tiny fp32 config, the oracle the C++ mixer (model/mamba2_mixer.h) is checked against at 1e-5.

Config: hidden 16, 4 mamba heads x 4 (inner 16), n_groups 2, ssm_state_size 8, conv_kernel 4, use_conv_bias,
chunk_size 4 (so a 7-token sequence spans two chunks, the second one partial), layer_norm_epsilon 1e-5,
time_step_min 0.1 (transformers' mixer clamps dt to (time_step_min, inf), not to time_step_limit). Every weight
is drawn at random (A_log, D, dt_bias and the gated norm's weight too, so their gradients are not special).
Cases, each x [2, 7, 16] and a random cotangent g (loss = sum(out * g)):
  plain   no mask
  padded  attention_mask: row 0 left-padded by 2, row 1 right-padded by 3
  packed  row 0 two documents of 3 and 4 tokens, row 1 one document; transformers' torch path does not reset
          at document boundaries, so the reference runs each document as its own sequence and concatenates:
          what moetune computes from position_ids [0 1 2 0 1 2 3].
mamba2.safetensors holds the weights (HF names, conv1d.weight [C, 1, K]), and per case <case>.x, <case>.g,
<case>.out, <case>.dx and <case>.grad.<weight>; mamba2.json the config and versions.

Run:  /work/refenv/bin/python tests/reference/make_mamba2_fixture.py tests/fixtures/nemotron_h_mamba2
"""
import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import NemotronHConfig
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer

SEED = 18
B, S = 2, 7
CONFIG = dict(hidden_size=16, mamba_num_heads=4, mamba_head_dim=4, n_groups=2, ssm_state_size=8, conv_kernel=4,
              use_conv_bias=True, use_bias=False, chunk_size=4, layer_norm_epsilon=1e-5, time_step_min=0.1,
              layers_block_type=["linear_attention"])


def mixer_grads(mixer, x, g, mask=None):
    """out, dx and every parameter's gradient of sum(mixer(x) * g)."""
    mixer.zero_grad()
    x = x.clone().requires_grad_(True)
    out = mixer(x, attention_mask=mask)
    (out * g).sum().backward()
    return out.detach(), x.grad.detach(), {n: p.grad.detach().clone() for n, p in mixer.named_parameters()}


def packed_reference(mixer, x, g, lengths):
    """Each document of row 0 alone (lengths), row 1 whole; outputs concatenated, gradients summed."""
    outs, dxs, total = [], [], None
    pieces = [(0, start, n) for start, n in zip([0] + list(torch.tensor(lengths).cumsum(0)[:-1].tolist()), lengths)]
    pieces.append((1, 0, S))
    rows = {0: ([], []), 1: ([], [])}
    for row, start, n in pieces:
        out, dx, grads = mixer_grads(mixer, x[row:row + 1, start:start + n], g[row:row + 1, start:start + n])
        rows[row][0].append(out)
        rows[row][1].append(dx)
        total = grads if total is None else {k: total[k] + grads[k] for k in total}
    outs = torch.cat([torch.cat(rows[r][0], dim=1) for r in (0, 1)])
    dxs = torch.cat([torch.cat(rows[r][1], dim=1) for r in (0, 1)])
    return outs, dxs, total


def main(out_dir):
    torch.manual_seed(SEED)
    config = NemotronHConfig(**CONFIG)
    mixer = NemotronHMamba2Mixer(config, layer_idx=0).float().train()
    with torch.no_grad():
        for name, p in mixer.named_parameters():
            p.copy_(torch.randn_like(p) * (0.5 if name in ("A_log", "dt_bias") else 0.3))
        mixer.norm.weight.add_(1.0)
    tensors = {name: p.detach().clone() for name, p in mixer.named_parameters()}
    masks = {"plain": None, "padded": torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])}
    for case in ("plain", "padded", "packed"):
        x, g = torch.randn(B, S, 16), torch.randn(B, S, 16)
        if case == "packed":
            out, dx, grads = packed_reference(mixer, x, g, [3, 4])
        else:
            out, dx, grads = mixer_grads(mixer, x, g, masks[case])
        tensors.update({f"{case}.x": x, f"{case}.g": g, f"{case}.out": out, f"{case}.dx": dx})
        tensors.update({f"{case}.grad.{name}": grad for name, grad in grads.items()})
        if case == "padded":
            tensors["padded.attention_mask"] = masks[case].to(torch.int64)
    tensors["packed.position_ids"] = torch.tensor([[0, 1, 2, 0, 1, 2, 3], list(range(S))], dtype=torch.int64)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(Path(out_dir) / "mamba2.safetensors"))
    info = {"config": CONFIG, "time_step_limit_used": [mixer.time_step_limit[0], str(mixer.time_step_limit[1])],
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__}}
    (Path(out_dir) / "mamba2.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
