#!/usr/bin/env python3
"""Builds the tokenizer.json fixtures and the ids HF `tokenizers` gives for a set of test strings.

Two byte-level BPE tokenizers are trained here on a small built-in corpus:
  qwen_style/tokenizer.json  NFC; Sequence[Split(Qwen2's regex, Isolated), ByteLevel(use_regex=False)];
                             merges as ["a", "b"] pairs; special tokens added after the vocabulary, as Qwen has
                             them, plus a few added tokens that exercise lstrip / rstrip / single_word / normalized.
  gpt2_style/tokenizer.json  no normalizer; ByteLevel(use_regex=True) alone, as GPT-2; merges in the legacy
                             "a b" spelling; <|endoftext|> inside the model vocabulary, as GPT-2 has it.
cases.json holds the test strings (a JSON list, since they contain newlines and \\r) and, per tokenizer, the ids of
`encode(text, add_special_tokens=False)`, those of `encode(text)` (with the post_processor's special tokens) and the
text `decode(ids)` gives back (with and without special tokens).
It also holds variants: a base tokenizer plus [JSON pointer, value] edits (another regex, add_prefix_space,
ignore_merges, no normalizer), which the C++ test applies to the base file the same way.

Run:  /work/refenv/bin/python tests/reference/make_tokenizer_fixtures.py tests/fixtures/tokenizers
Needs `tokenizers` (the version is recorded in cases.json).
"""
import copy
import json
import sys
import unicodedata
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB_SIZE = 1400

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's what they're saying: we've seen it, I'm sure, you'll agree.",
    "Tokenizers split text into pieces; byte-level BPE never meets an unknown character, because every byte is "
    "in the base alphabet. Merges are learned from pair frequencies and applied by rank.",
    "Fine-tuning a mixture-of-experts model routes each token to a few experts; the router's load-balancing loss "
    "keeps the experts busy. The learning rate warms up linearly and then decays along a cosine.",
    "In 2024 the model was trained on 15,000,000,000,000 tokens at 3.14159 tokens per joule, said nobody, ever.",
    "def tokenize(text: str) -> list[int]:\n    ids = []\n    for word in text.split():\n        ids.append(vocab[word])\n"
    "    return ids\n",
    "int main(int argc, char** argv) {\n  std::vector<int32_t> ids{1, 2, 3};\n  return ids.size() == 3 ? 0 : 1;\n}\n",
    "for (auto& [key, value] : map) { if (value->next != nullptr && key[0] == '#') continue; }",
    "{\"name\": \"moetune\", \"version\": \"0.1.0\", \"dependencies\": [\"fmt\", \"nlohmann_json\"]}",
    "SELECT id, name FROM users WHERE age >= 21 AND name LIKE '%son' ORDER BY id DESC;",
    "Le café est très bon, n'est-ce pas ? Où est la bibliothèque ? À bientôt, Hélène et François.",
    "Ünïcödé façade naïve résumé coöperate Zürich São Paulo Ærøskøbing Łódź Dvořák crème brûlée.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Straße, Größe, Maße.",
    "El niño comió piñata en la mañana; ¿Dónde está el baño? ¡Olé!",
    "机器学习是人工智能的一个分支。我们使用大型语言模型来理解和生成文本。今天天气很好。",
    "東京は日本の首都です。ひらがなとカタカナと漢字を使います。ありがとうございます。",
    "한국어 텍스트도 토큰화합니다. 안녕하세요, 만나서 반갑습니다.",
    "Привет, мир! Это тестовый текст на русском языке. Ελληνικά γράμματα: αβγδε.",
    "مرحبا بالعالم. हिन्दी में पाठ। שלום עולם.",
    "Emoji: 😀 😃 😄 👍🏽 🎉🎉 ❤️ 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷 🚀✨",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 12345 3.14 2.71828 1e-5 0x1F 1,000,000 42nd 3rd",
    "Tabs\tand\ttabs\t\tdouble, spaces    four, and newlines\n\nparagraphs\r\nwindows\r\nline endings.",
    "Mr. O'Neil's dog isn't here; THEY'RE GONE, WE'VE LEFT, I'M DONE, YOU'LL SEE, HE'D KNOW.",
    "https://huggingface.co/Qwen/Qwen3-30B-A3B/resolve/main/tokenizer.json?download=true#section-2",
    "email: someone@example.com, path: /usr/local/lib/libmoetune.a, C:\\Users\\name\\file.txt",
    "α + β = γ; ∑ x_i² ≤ ∞; ∫ f(x) dx ≈ 0.5 ± 0.01; 5 × 3 ÷ 2 → 7.5 ✓",
]


def training_corpus():
    # Repeat with small variations so that merges reach past single words into common pieces.
    for round_index in range(6):
        for line in CORPUS:
            yield line if round_index % 2 == 0 else line.lower()
        yield " ".join(CORPUS[round_index::3])


def nfd(text):
    return unicodedata.normalize("NFD", text)


# The test strings. NFD ones are built with unicodedata so that the file holds decomposed accents.
CASES = [
    "",
    " ",
    "     ",
    "\t",
    "\n",
    "\r\n",
    "Hello world",
    "Hello, world!",
    " leading space",
    "trailing space ",
    "The quick brown fox jumps over the lazy dog.",
    "It's what THEY'RE saying: We've seen it; I'M sure you'll agree, she'd know. DON'T. Isn'T",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D ’s",
    "a    b     c      d\t\te\t \t f",
    "spaces at end      ",
    "   spaces at start",
    "line one\nline two\n\n\nline five\r\nwindows\r\n\r\nend\r",
    "mixed \n \n\t\n  \r\n  indentation",
    "1 12 123 1234 12345 123456 1234567 12345678901234567890",
    "3.14159 2,718 1e-10 -42 +7 0x7fff 1_000_000 v1.2.3",
    "In 2024, 15000000000000 tokens cost $1,234.56 (approx.)",
    "def f(x):\n    return x ** 2 + 3 * x - 1  # comment\n",
    "if (a != b && c <= d || !e) { x->y[0] += z; } // done",
    "std::vector<std::pair<int, float>> v{{1, 2.0f}};",
    "print(f\"{name!r:>10}\")\n\tpass\n",
    "<html><body class=\"main\">&nbsp;&amp;</body></html>",
    "机器学习是人工智能的一个分支。",
    "我们使用大型语言模型来理解和生成文本，今天天气很好！",
    "日本語のテキスト、ひらがなとカタカナ。",
    "한국어 텍스트 안녕하세요",
    "Привет, мир! Ελληνικά: αβγ",
    "مرحبا بالعالم हिन्दी",
    "😀😃😄 👍🏽👍🏿 🎉",
    "👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇩🇪 ❤️‍🔥",
    "emoji🚀inside✨words",
    nfd("café résumé naïve Zürich"),
    nfd("Ångström Øresund Łódź Dvořák crème brûlée"),
    "café résumé naïve Zürich",
    nfd("Ä") + " " + "Ä" + " " + nfd("ñ") + "ñ",
    "e\u0301\u0327 a\u0328\u0301 o\u0308\u0304",  # combining marks out of canonical order
    "\u212b \u2126 \u00c5",  # singletons that NFC maps to other characters
    "\u1100\u1161\u11a8 \uac00\u11a8",  # conjoining jamo that NFC composes into syllables
    "<|endoftext|>",
    "Hello<|endoftext|>world",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n",
    "<|im_start|><|im_end|><|endoftext|><|endoftext|>",
    "<|im_start|> spaced <|im_end|>  ",
    "<|endoftext",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "<tool> vs <tool_call>{\"name\": \"f\"}</tool_call>",
    "before   [LSTRIP]   after",
    "x[LSTRIP]y",
    "hello_world and say hello_world! but not hello_worlds or xhello_world",
    "un" + nfd("café") + " and café and caf" + "\u00e9",
    "\u00a0non-breaking\u00a0space\u3000ideographic\u2003em space",
    "\u200bzero\u200bwidth\ufeffbom",
    "mongolian\u180evowel\u180e \u180e next\u0085line \u0085\u0085 x",  # characters whose \\s-ness differs by engine
    "kawi \U00011f04\U00011f05\U00011f50 \u0cf3",  # letters and digits new in Unicode 15
    "control\x00chars\x01\x7f and \x1b[31mred\x1b[0m",
    "A" * 200,
    "ab " * 60,
    "Mixed UPPER lower CamelCase snake_case kebab-case SCREAMING_CASE",
    "URL https://example.com/path?q=1&r=two#frag and mail a.b@c.de",
    "α + β = γ; ∑ x_i² ≤ ∞; ∫ f(x) dx ≈ 0.5 ± 0.01",
    "\U0001d400\U0001d401 \U0001f600 \U00020000 \U0010fffd",
    "The END.\n\n\n\n",
    "say qwertyuiop now, qwertyuiop",
    "the" * 40 + " " + "internationalization" * 3,  # words past 32 bytes take the priority-queue merge
    "Tokenizationtokenizationtokenization representationsrepresentations 1234567890123456789012345678901234567890",
]

QWEN_ADDED = [
    AddedToken("<|endoftext|>", special=True, normalized=False),
    AddedToken("<|im_start|>", special=True, normalized=False),
    AddedToken("<|im_end|>", special=True, normalized=False),
    AddedToken("<think>", special=False, normalized=False),
    AddedToken("</think>", special=False, normalized=False),
    AddedToken("<tool>", special=False, normalized=False),
    AddedToken("<tool_call>", special=False, normalized=False),
    AddedToken("</tool_call>", special=False, normalized=False),
    AddedToken("[LSTRIP]", special=True, normalized=False, lstrip=True, rstrip=True),
    AddedToken("hello_world", special=False, normalized=True, single_word=True),
    AddedToken(nfd("café"), special=False, normalized=True),  # matched against the NFC text as "café"
]


def train(pre_tokenizer, normalizer, special_tokens):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=special_tokens)
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    return tokenizer


def qwen_style():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer = train(pre, normalizers.NFC(), special_tokens=[])
    tokenizer.add_tokens(QWEN_ADDED)
    tokenizer.post_processor = tokenizers.processors.ByteLevel(trim_offsets=False)
    return json.loads(tokenizer.to_str())


def gpt2_style():
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer = train(pre, None, special_tokens=["<|endoftext|>"])
    tokenizer.post_processor = tokenizers.processors.ByteLevel(trim_offsets=True)
    spec = json.loads(tokenizer.to_str())
    # GPT-2's own file (and any written by tokenizers < 0.20) spells merges as "a b" strings.
    spec["model"]["merges"] = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in spec["model"]["merges"]]
    return spec


def split_sequence(*patterns):
    splits = [{"type": "Split", "pattern": pattern, "behavior": "Isolated", "invert": False} for pattern in patterns]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    return {"type": "Sequence", "pretokenizers": splits + [byte_level]}


VARIANTS = {
    # GPT-2's pre-tokenizer with a prefix space, and ignore_merges (as Llama-3 sets it) with a whole word put into
    # the vocabulary that the merges would not produce, so that ignore_merges changes ids.
    "gpt2_prefix_space_ignore_merges": ("gpt2_style", [
        ["/pre_tokenizer/add_prefix_space", True],
        ["/model/ignore_merges", True],
        ["/model/vocab/\u0120qwertyuiop", VOCAB_SIZE + 10],
    ]),
    # Llama-3's regex (numbers in groups of up to three) and ignore_merges, with number tokens in the vocabulary (the
    # training split digits one by one, so no merge makes them) that only ignore_merges can give.
    "llama3_regex": ("qwen_style", [
        ["/pre_tokenizer/pretokenizers/0/pattern/Regex", LLAMA3_PATTERN],
        ["/model/ignore_merges", True],
        ["/model/vocab/123", VOCAB_SIZE + 20],
        ["/model/vocab/000", VOCAB_SIZE + 21],
    ]),
    # No normalizer (NFD text stays NFD) and two Split stages, the first with a literal String pattern.
    "no_normalizer_string_split": ("qwen_style", [
        ["/normalizer", None],
        ["/pre_tokenizer", split_sequence({"String": "\n"}, {"Regex": QWEN_PATTERN})],
    ]),
    # Llama-3's post_processor: Sequence[ByteLevel, TemplateProcessing] putting a BOS before the text (and, to
    # check the order, an EOS after it).
    "llama3_template_processing": ("qwen_style", [
        ["/post_processor", {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                        {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
             "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [1401], "tokens": ["<|im_start|>"]},
                                "<|endoftext|>": {"id": "<|endoftext|>", "ids": [1400], "tokens": ["<|endoftext|>"]}}},
        ]}],
    ]),
    # A normalizer Sequence holding NFC, and ByteLevel with its own regex after the Split.
    "nfc_sequence_byte_level_regex": ("qwen_style", [
        ["/normalizer", {"type": "Sequence", "normalizers": [{"type": "NFC"}]}],
        ["/pre_tokenizer/pretokenizers/1/use_regex", True],
    ]),
}


def apply_edits(spec, edits):
    spec = copy.deepcopy(spec)
    for pointer, value in edits:
        *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]
        target = spec
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return spec


def expectations(tokenizer, texts=CASES):
    results = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        results.append({"ids": ids, "ids_with_special_tokens": tokenizer.encode(text).ids,
                        "decoded": tokenizer.decode(ids, skip_special_tokens=False),
                        "decoded_skip_special": tokenizer.decode(ids, skip_special_tokens=True)})
    return results


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tokenizers")
    specs = {"qwen_style": qwen_style(), "gpt2_style": gpt2_style()}
    cases = {"tokenizers_version": tokenizers.__version__, "texts": CASES, "tokenizers": {}, "variants": {}}
    for name, spec in specs.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        text = json.dumps(spec, ensure_ascii=False, indent=None, separators=(",", ":"))
        (out / name / "tokenizer.json").write_text(text, encoding="utf-8")
        # Encode with the file as written, so that what is checked is what the C++ side reads.
        cases["tokenizers"][name] = expectations(Tokenizer.from_file(str(out / name / "tokenizer.json")))
    for name, (base, edits) in VARIANTS.items():
        tokenizer = Tokenizer.from_str(json.dumps(apply_edits(specs[base], edits)))
        cases["variants"][name] = {"base": base, "edits": edits}
        cases["tokenizers"][name] = expectations(tokenizer)
    (out / "cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=None) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
