#!/usr/bin/env python3
"""Builds a SentencePiece-style BPE tokenizer.json (as Llama-2, Mistral and Mixtral ship them) and the ids HF
`tokenizers` gives for the test strings of make_tokenizer_fixtures.py, plus what transformers gives with the
tokenizer_config.json settings add_bos_token / add_eos_token.

  spm_style/tokenizer.json  no normalizer; Metaspace(prepend_scheme "first", split false); BPE with byte_fallback,
                            fuse_unk and <unk>; the 256 "<0xAB>" byte tokens in the vocabulary; a character alphabet
                            cut short so that rarer characters take the byte fallback; decoder Sequence[Replace "▁"
                            -> " ", ByteFallback, Fuse, Strip one leading space] (what transformers writes for
                            Llama-2 / Mistral today); <unk>, <s>, </s> and [INST], [/INST] as added tokens.
spm_cases.json holds, per tokenizer (the file and variants of it given as [JSON pointer, value] edits, applied by the
C++ test the same way), the ids of encode(text, add_special_tokens=False), of encode(text), and decode's text; and
per tokenizer_config.json variant the ids of transformers' AutoTokenizer(text).

Run:  /work/refenv/bin/python tests/reference/make_sentencepiece_fixtures.py tests/fixtures/tokenizers
Needs `tokenizers` and `transformers` (versions recorded in spm_cases.json).
"""
import json
import sys
import tempfile
from pathlib import Path

import tokenizers
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).parent))
from make_tokenizer_fixtures import CASES, apply_edits, expectations, training_corpus  # noqa: E402

VOCAB_SIZE = 1200
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
SPECIAL = ["<unk>", "<s>", "</s>"]

# Text the SentencePiece-style cases add: spaces beside added tokens, byte fallback, chat markup.
SPM_CASES = CASES + [
    "<s>[INST] Hello there [/INST] General Kenobi!</s>",
    "<s> [INST]  two spaces  [/INST]</s><s>again",
    "[INST]no spaces[/INST]answer",
    "text then <s>",
    "▁already▁has▁metaspace ▁ ▁▁",
    "Ünïcödé 🚀 ꙮ 𝔘 \u0378 rare characters take their bytes",
]


def train():
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    # Trained on words cut at each "▁" (as SentencePiece cuts at whitespace), used without cutting (split=False).
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False, limit_alphabet=120,
                                  special_tokens=SPECIAL + BYTE_TOKENS)
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    tokenizer.add_tokens([AddedToken("[INST]", special=False, normalized=False),
                          AddedToken("[/INST]", special=False, normalized=False)])
    spec = json.loads(tokenizer.to_str())
    # The byte tokens belong to the model's vocabulary, as in Llama-2's file, not to the added tokens.
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in BYTE_TOKENS]
    return spec


LEGACY_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}

VARIANTS = {
    # Llama-2's legacy file: Prepend + Replace normalizer and no pre-tokenizer; "▁" goes before every piece.
    "spm_legacy_normalizer": [["/normalizer", LEGACY_NORMALIZER], ["/pre_tokenizer", None]],
    # An older Metaspace: prepend always, split at each "▁", and the Metaspace decoder.
    "spm_metaspace_always_split": [
        ["/pre_tokenizer", {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}],
        ["/decoder", {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}]],
    # No prefix at all, and no byte fallback: unknown characters give <unk>, each on its own.
    "spm_never_no_fallback": [
        ["/pre_tokenizer", {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": False}],
        ["/model/byte_fallback", False], ["/model/fuse_unk", False]],
    # Unknown characters fused into one <unk>, and ignore_merges.
    "spm_fuse_unk_ignore_merges": [["/model/byte_fallback", False], ["/model/ignore_merges", True],
                                   ["/model/vocab/▁qwertyuiop", VOCAB_SIZE + 10]],
    # A post_processor in the file (Llama-2's TemplateProcessing with <s>).
    "spm_template_processing": [["/post_processor", {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}]],
}

VARIANTS["spm_legacy_template"] = VARIANTS["spm_legacy_normalizer"] + VARIANTS["spm_template_processing"]

# Model folders for transformers' AutoTokenizer: (variant, tokenizer_config.json, config.json's model_type or None).
BOS_EOS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
CONFIGS = {
    # add_bos_token / add_eos_token are dropped when there is a tokenizer.json: the file's post_processor decides.
    "add_bos_eos_ignored": ("spm_template_processing",
                            dict(BOS_EOS, add_bos_token=False, add_eos_token=True, tokenizer_class="PreTrainedTokenizerFast"),
                            None),
    # Llama folders naming LlamaTokenizer get its own pipeline: Metaspace "first" (not the legacy normalizer).
    "llama_class": ("spm_legacy_template", dict(BOS_EOS, tokenizer_class="LlamaTokenizer", add_bos_token=True), "llama"),
    "llama_class_legacy": ("spm_legacy_template", dict(BOS_EOS, tokenizer_class="LlamaTokenizerFast", legacy=True), "llama"),
    "llama_class_no_prefix_space": ("spm_legacy_template",
                                    dict(BOS_EOS, tokenizer_class="LlamaTokenizer", add_prefix_space=False), "llama"),
    # Mistral folders keep the file as it is (TokenizersBackend without mistral_common).
    "mistral_keeps_file": ("spm_legacy_template", dict(BOS_EOS, tokenizer_class="LlamaTokenizer"), "mistral"),
}


def transformers_ids(spec, config, model_type, texts):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        (Path(folder) / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        if model_type:
            (Path(folder) / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        return [tokenizer(text)["input_ids"] for text in texts]


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tokenizers")
    spec = train()
    (out / "spm_style").mkdir(parents=True, exist_ok=True)
    text = json.dumps(spec, ensure_ascii=False, indent=None, separators=(",", ":"))
    (out / "spm_style" / "tokenizer.json").write_text(text, encoding="utf-8")
    cases = {"tokenizers_version": tokenizers.__version__, "transformers_version": transformers.__version__,
             "texts": SPM_CASES, "tokenizers": {}, "variants": {}, "configs": {}}
    cases["tokenizers"]["spm_style"] = expectations(Tokenizer.from_file(str(out / "spm_style" / "tokenizer.json")), SPM_CASES)
    for name, edits in VARIANTS.items():
        cases["variants"][name] = {"base": "spm_style", "edits": edits}
        cases["tokenizers"][name] = expectations(Tokenizer.from_str(json.dumps(apply_edits(spec, edits))), SPM_CASES)
    for name, (variant, config, model_type) in CONFIGS.items():
        cases["configs"][name] = {"variant": variant, "tokenizer_config": config, "model_type": model_type,
                                  "ids": transformers_ids(apply_edits(spec, VARIANTS[variant]), config, model_type, SPM_CASES)}
    (out / "spm_cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=None) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
