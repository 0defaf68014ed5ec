#!/usr/bin/env python3
"""What transformers' apply_chat_template(..., tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
gives for chat templates with {% generation %} blocks: the token ids and the assistant mask, per conversation.

Two folders are built from the tokenizer fixtures: ChatML with a byte-level tokenizer (qwen_style) and a
Llama-2-style [INST] template with a SentencePiece-style one (spm_style). The C++ test
(tests/data/test_generation_masks.cpp) rebuilds each folder and must give the same ids and the same scored tokens.

Run:  /work/refenv/bin/python tests/reference/make_generation_mask_fixtures.py tests/fixtures
Needs transformers (version recorded in the output).
"""
import json
import sys
import tempfile
from pathlib import Path

import tokenizers
import transformers

CHATML = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}{% generation %}{{- message.content + '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

INST = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}{{- '[INST] ' + message.content + ' [/INST]' }}"
    "{%- elif message.role == 'assistant' %}{% generation %}{{- ' ' + message.content + eos_token }}{% endgeneration %}"
    "{%- endif %}"
    "{%- endfor %}")

FOLDERS = {
    "chatml_byte_level": {"tokenizer": "qwen_style", "template": CHATML,
                          "special": {"eos_token": "<|im_end|>", "bos_token": None}},
    "inst_sentencepiece": {"tokenizer": "spm_style", "template": INST,
                           "special": {"eos_token": "</s>", "bos_token": "<s>"}},
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello there!"}, {"role": "assistant", "content": "General Kenobi."}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "Ünïcödé 你好?"},
     {"role": "assistant", "content": "Yes: ✓ 🙂\nTwo lines."}],
]


def main(fixtures):
    fixtures = Path(fixtures)
    out = {"made_with": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
           "conversations": CONVERSATIONS, "folders": {}}
    for name, spec in FOLDERS.items():
        with tempfile.TemporaryDirectory() as folder:
            tokenizer_json = (fixtures / "tokenizers" / spec["tokenizer"] / "tokenizer.json").read_text(encoding="utf-8")
            (Path(folder) / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
            config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": spec["template"],
                      **{k: v for k, v in spec["special"].items() if v is not None}}
            (Path(folder) / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
            results = []
            for messages in CONVERSATIONS:
                encoded = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                                        return_assistant_tokens_mask=True)
                results.append({"input_ids": encoded["input_ids"], "assistant_masks": encoded["assistant_masks"]})
        out["folders"][name] = {"tokenizer": spec["tokenizer"], "tokenizer_config": config, "results": results}
    path = fixtures / "chat_templates" / "generation_masks.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
