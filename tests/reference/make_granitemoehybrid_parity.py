#!/usr/bin/env python3
"""Writes the training-parity files (parity.safetensors, parity.json; expected.json again, the same values) for
granitemoehybrid_tiny, the Granite 4.0 hybrid fixture make_fixtures.py saves (Mamba2 and attention layers, MoE with a
shared expert, Granite's multipliers, tied embeddings), as make_nemotron_h_fixtures.py writes them: transformers'
torch Mamba2 path ignores position_ids, so the packed case runs every Mamba2 layer on each document alone; and
GraniteMoeHybridModel builds its attention mask without position_ids (transformers 5.17), so its packed row would get
a plain causal mask: the packed case hands them to create_causal_mask, as the other families' models do, which gives
the block-diagonal mask moetune computes.

Run:  /work/refenv/bin/python tests/reference/make_granitemoehybrid_parity.py tests/fixtures
"""
import contextlib
import json
import sys
from pathlib import Path

from transformers.models.granitemoehybrid import modeling_granitemoehybrid

sys.path.insert(0, str(Path(__file__).parent))
import make_nemotron_h_fixtures  # noqa: E402

NAME = "granitemoehybrid_tiny"


@contextlib.contextmanager
def mask_from_position_ids():
    """GraniteMoeHybridModel.forward's create_causal_mask given the forward's position_ids."""
    module = modeling_granitemoehybrid
    model_forward, make_mask = module.GraniteMoeHybridModel.forward, module.create_causal_mask
    current = {}

    def forward(self, *args, position_ids=None, **kwargs):
        current["position_ids"] = position_ids
        return model_forward(self, *args, position_ids=position_ids, **kwargs)

    module.GraniteMoeHybridModel.forward = forward
    module.create_causal_mask = lambda **kwargs: make_mask(**kwargs, position_ids=current.get("position_ids"))
    try:
        yield
    finally:
        module.GraniteMoeHybridModel.forward, module.create_causal_mask = model_forward, make_mask


def main(root: Path):
    folder = root / NAME
    config = json.loads((folder / "config.json").read_text())
    count = json.loads((folder / "expected.json").read_text())["num_parameters"]
    with mask_from_position_ids():
        make_nemotron_h_fixtures.write_fixture(folder, NAME, config["architectures"][0], count,
                                              modeling_granitemoehybrid.GraniteMoeHybridMambaLayer,
                                              coef=config.get("router_aux_loss_coef"))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"))
