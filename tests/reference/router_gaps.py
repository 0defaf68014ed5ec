#!/usr/bin/env python3
"""Prints, for a parity fixture's plain / padded / packed batches as transformers (fp32) routes them, each MoE
router's smallest gap between its k-th and (k+1)-th logit and the token it sits at: a gap far inside bf16's noise
(~1e-2 relative of logits of order one) is a near-tie the GPU's bf16 run may route the other way, which moves every
gradient below that layer (tests/gpu/test_model_parity.cpp cites what this prints).

Run:  /work/refenv/bin/python tests/reference/router_gaps.py tests/fixtures/granitemoehybrid_tiny
Routers found by class name (...Router, ...TopKRouter) whose forward returns the logits last; the packed batch of a
Granite 4.0 hybrid runs as its parity script runs it (make_granitemoehybrid_parity.py).
"""
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import make_granitemoehybrid_parity  # noqa: E402
import make_nemotron_h_fixtures  # noqa: E402
import make_parity  # noqa: E402


def main(folder: Path):
    hybrid = folder.name == make_granitemoehybrid_parity.NAME
    with make_granitemoehybrid_parity.mask_from_position_ids() if hybrid else contextlib.nullcontext():
        model = make_parity.load(folder, "eager")
        forward = make_parity.forward
        if hybrid:
            from transformers.models.granitemoehybrid import modeling_granitemoehybrid
            forward = make_nemotron_h_fixtures.packed_forward_for(modeling_granitemoehybrid.GraniteMoeHybridMambaLayer)
        routers = [m for m in model.modules() if type(m).__name__.endswith("Router")]
        top_k = model.config.num_experts_per_tok
        for case, inputs in make_parity.make_inputs(model.config.vocab_size).items():
            logits = []
            hooks = [r.register_forward_hook(lambda _m, _a, out: logits.append(out[-1] if isinstance(out, tuple) else out))
                     for r in routers]
            with torch.no_grad():
                forward(model, **inputs)
            for hook in hooks:
                hook.remove()
            for index, values in enumerate(logits):
                values = values.float().reshape(-1, values.shape[-1])
                ranked = values.sort(dim=-1, descending=True).values
                gaps = ranked[:, top_k - 1] - ranked[:, top_k]
                print(f"{case}: router {index}: smallest gap {gaps.min().item():.2e} at token {gaps.argmin().item()} "
                      f"(logits up to {values.abs().max().item():.2f})")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
