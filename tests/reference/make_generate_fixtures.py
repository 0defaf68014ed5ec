"""Greedy continuations by transformers' generate() for moetune's generation test (tests/model/test_generate.cpp).

Each tiny fp32 fixture continues a fixed prompt of token ids by 20 greedy tokens, with transformers' own KV cache
(its default), never stopping early. moetune's generate must give the same tokens with and without its cache.

    /work/refenv/bin/python tests/reference/make_generate_fixtures.py tests/fixtures [fixture names...]

With names, only those are (re)made and merged into the existing greedy.json (each entry records its versions).

writes tests/fixtures/generate/greedy.json (made with torch 2.15.0 and transformers 5.17.0 on the CPU: recorded in it, with the smallest gap between the best
and second-best logit on the way, which shows how far fp32 noise is from changing a token).
"""
import json
import sys
from pathlib import Path

import torch
import transformers

FIXTURES = ["llama_tiny", "qwen3_moe_tiny", "mixtral_tiny", "qwen2_moe_tiny", "gpt_oss_tiny", "deepseek_v3_tiny",
            "nemotron_h_tiny", "glm4_moe_tiny", "glm4_moe_quarter_tied",
            "glm4_moe_lite_tiny", "phi3_tiny", "phi4_mini_tiny", "smollm3_tiny", "olmoe_tiny", "minimax_m2_tiny",
            "deepseek_v2_tiny", "deepseek_v2_grouped", "dots1_tiny", "olmo2_tiny", "olmo3_tiny",
            "exaone4_tiny", "solar_open_tiny", "flex_olmo_tiny",
            "exaone_moe_tiny", "gemma3_tiny", "gemma_tiny", "ernie4_5_moe_tiny", "granitemoehybrid_tiny",
            "granitemoeshared_tiny", "qwen3_next_tiny"]
PROMPT = [3, 17, 42, 5, 88, 9]  # longer than gpt_oss_tiny's sliding window (4), so the cache slides past it
NEW_TOKENS = 20
# Generations that run past longrope's original context (phi4_mini_tiny's 32), without transformers' cache (each
# step's whole sequence runs the long factors once it passes 32: the reference) and with it (Phi-3's generate drops
# its cache there but then runs each later token alone: recorded to show it, tests/model/test_generate.cpp):
# "past_original_context" in greedy.json.
PAST_ORIGINAL_CONTEXT = {"phi4_mini_tiny": 40}


def greedy(model, count: int, use_cache: bool) -> tuple[list[int], float]:
    """`count` greedy tokens after PROMPT, and the smallest gap between the best and second-best logit on the way:
    far above fp32 noise (1e-5 relative), so another correct implementation cannot pick a different token."""
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=count, min_new_tokens=count,
                             eos_token_id=None, pad_token_id=0, output_scores=True, return_dict_in_generate=True,
                             use_cache=use_cache)
    gap = min(float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores)
    return out.sequences[0, len(PROMPT):].tolist(), gap


def main(fixtures_dir: Path, names: list[str]) -> None:
    torch.manual_seed(0)
    path = fixtures_dir / "generate" / "greedy.json"
    old = json.loads(path.read_text()) if names and path.exists() else {}
    results, margins = old.get("greedy", {}), old.get("smallest_top2_gap", {})
    versions = old.get("versions_by_fixture", {n: old["versions"] for n in results} if "versions" in old else {})
    past = old.get("past_original_context", {})
    for name in names or FIXTURES:
        model = transformers.AutoModelForCausalLM.from_pretrained(fixtures_dir / name, dtype=torch.float32)
        model.eval()
        tokens, margins[name] = greedy(model, NEW_TOKENS, use_cache=True)
        results[name] = tokens
        versions[name] = {"torch": torch.__version__, "transformers": transformers.__version__}
        print(name, results[name], f"smallest top-2 gap {margins[name]:.2e}")
        if name in PAST_ORIGINAL_CONTEXT:
            count = PAST_ORIGINAL_CONTEXT[name]
            (cached, cached_gap), (uncached, uncached_gap) = (greedy(model, count, use_cache=c) for c in (True, False))
            past[name] = {"cached": cached, "uncached": uncached, "smallest_top2_gap": min(cached_gap, uncached_gap)}
            print(name, "past the original context:", past[name])
    record = {"prompt": PROMPT, "greedy": results, "smallest_top2_gap": margins, "versions_by_fixture": versions,
              "past_original_context": past}
    (fixtures_dir / "generate").mkdir(exist_ok=True)
    (fixtures_dir / "generate" / "greedy.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
