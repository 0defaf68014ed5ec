#!/usr/bin/env python3
"""Makes the embedded default of `moetune finetune`: a tiny Qwen3-MoE model (random weights), its byte-level BPE
tokenizer and chat template, and a small task in chat form: "Which is larger, 47 or 52?" -> "52".

The task is easy to state and hard to fake: the answer is one of the two numbers in the question, so a model that
has learned nothing picks right about half the time by luck at best, and the held-out questions are pairs it never
saw. Written to assets/default/ (model/, train.jsonl, test.jsonl); deterministic.

Run: python3 scripts/make_default_assets.py   (needs torch, transformers 5, tokenizers; made with the versions
written into assets/default/model/expected.json)
"""
import json
import random
from pathlib import Path

import tokenizers
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, Qwen3MoeConfig

ROOT = Path(__file__).resolve().parent.parent / "assets" / "default"
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def question(a: int, b: int) -> dict:
    return {"messages": [{"role": "user", "content": f"Which is larger, {a} or {b}?"},
                         {"role": "assistant", "content": str(max(a, b))}]}


def make_task(rng: random.Random):
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100) if a != b]
    rng.shuffle(pairs)
    test, train = pairs[:200], pairs[200:2200]
    return [question(a, b) for a, b in train], [question(a, b) for a, b in test]


def make_tokenizer(texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def main():
    rng = random.Random(20261130)
    train, test = make_task(rng)
    ROOT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.jsonl", train), ("test.jsonl", test)):
        (ROOT / name).write_text("".join(json.dumps(r) + "\n" for r in rows))

    model_dir = ROOT / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    texts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for r in train for m in r["messages"]]
    tok = make_tokenizer(texts)
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (model_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "TokenizersBackend", "backend": "tokenizers", "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2) + "\n")

    torch.manual_seed(20261130)
    config = Qwen3MoeConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=64, norm_topk_prob=True, max_position_embeddings=128, tie_word_embeddings=False,
        output_router_logits=True, router_aux_loss_coef=0.01, rope_theta=10000.0,
        bos_token_id=None, eos_token_id=tok.token_to_id("<|im_end|>"), pad_token_id=tok.token_to_id("<|endoftext|>"))
    config.architectures = ["Qwen3MoeForCausalLM"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(model_dir)
    (model_dir / "expected.json").write_text(json.dumps({
        "num_parameters": model.num_parameters(),
        "made_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                      "tokenizers": tokenizers.__version__}}, indent=2) + "\n")
    print(f"{model_dir}: {model.num_parameters()} parameters, vocab {tok.get_vocab_size()}; "
          f"{len(train)} train / {len(test)} test questions")


if __name__ == "__main__":
    main()
