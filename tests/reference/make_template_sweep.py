#!/usr/bin/env python3
"""Renders every chat template that PyPI's `trl` wheel ships (trl/chat_templates/*.jinja: Qwen2.5/3, Llama 3.x,
Gemma, DeepSeek, gpt-oss, GLM, Phi, Cohere, Nemotron, LFM2, ...) with several conversations (multi-turn, system,
tools and tool calls, thinking) as transformers 5.x renders them (render_jinja_template, the function
apply_chat_template calls; with return_assistant_tokens_mask for templates with {% generation %} blocks), and writes
the expected text, the {% generation %} spans (as UTF-8 byte offsets) or the error, per template and conversation.

The templates are not copied into this repository: the fixture names each one with its size and FNV-1a-64 hash,
and the C++ test (tests/text/test_template_sweep.cpp) reads them from the unpacked wheel named by the environment
variable MOETUNE_TRL_TEMPLATES, skipping when it is not set. To run both:
  pip download trl==1.16.0 --no-deps -d /tmp/trl && unzip -q /tmp/trl/trl-1.16.0-py3-none-any.whl -d /tmp/trl/x
  /work/refenv/bin/python tests/reference/make_template_sweep.py /tmp/trl/x/trl/chat_templates tests/fixtures/chat_templates/trl_sweep.json
  MOETUNE_TRL_TEMPLATES=/tmp/trl/x/trl/chat_templates build-cpu/tests/moetune_tests --gtest_filter='TemplateSweep*'
"""
import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

FIXED_TIME = datetime(2025, 8, 5, 14, 30, 0)
SPECIAL_TOKENS = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>", "unk_token": "<|unk|>"}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}

CONVERSATIONS = {
    "single_turn_prompt": (True, {}, [{"role": "user", "content": "Hello! Who are you?"}]),
    "system_multi_turn": (False, {}, [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3? Ünïcödé → 你好 🙂"},
        {"role": "assistant", "content": "6, of course.\nNext line."}]),
    "thinking": (False, {}, [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "<think>\nRayleigh scattering.\n</think>\n\nShort waves scatter more."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "reasoning_content": "Be polite.", "content": "You are welcome."}]),
    "thinking_disabled": (True, {"enable_thinking": False}, [{"role": "user", "content": "Quick: capital of France?"}]),
    "tools": (False, {"tools": [WEATHER_TOOL]}, [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "name": "get_weather", "content": "{\"temperature\": 21}"},
        {"role": "assistant", "content": "It is 21 °C in Paris."}]),
}


def fnv1a64(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def byte_offset(text, index):
    return len(text[:index].encode("utf-8"))


def render(template, messages, add_generation_prompt, extra):
    extra = dict(extra)
    tools = extra.pop("tools", None)
    has_generation = "generation" in template and transformers.utils.chat_template_utils.re.search(
        r"\{\%-?\s*generation\s*-?\%\}", template) is not None
    rendered, indices = render_jinja_template(
        conversations=[messages], tools=tools, chat_template=template, add_generation_prompt=add_generation_prompt,
        return_assistant_tokens_mask=has_generation and not add_generation_prompt,
        strftime_now=lambda fmt: FIXED_TIME.strftime(fmt), **SPECIAL_TOKENS, **extra)
    text = rendered[0]
    spans = None
    if has_generation and not add_generation_prompt:
        spans = [[byte_offset(text, start), byte_offset(text, end)] for start, end in indices[0]]
    return text, spans


def main(template_dir, out_file):
    cases = []
    names = sorted(p.name for p in Path(template_dir).glob("*.jinja"))
    for name in names:
        data = (Path(template_dir) / name).read_bytes()
        template = data.decode("utf-8")
        for conversation, (add_generation_prompt, extra, messages) in CONVERSATIONS.items():
            record = {"template": name, "conversation": conversation}
            try:
                record["expected"], spans = render(template, messages, add_generation_prompt, extra)
                if spans is not None:
                    record["generation_spans"] = spans
            except Exception as error:  # noqa: BLE001 - a template that refuses a conversation is a case too
                record["expected_error"] = f"{type(error).__name__}: {error}"
            cases.append(record)
    templates = {name: {"bytes": len((Path(template_dir) / name).read_bytes()),
                        "fnv1a64": f"{fnv1a64((Path(template_dir) / name).read_bytes()):016x}"} for name in names}
    document = {"made_with": {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
                              "trl_wheel": "trl-1.16.0-py3-none-any.whl"},
                "fixed_time": FIXED_TIME.isoformat(), "special_tokens": SPECIAL_TOKENS,
                "conversations": {k: {"add_generation_prompt": v[0], "extra": v[1], "messages": v[2]}
                                  for k, v in CONVERSATIONS.items()},
                "templates": templates, "cases": cases}
    Path(out_file).write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    errors = sum("expected_error" in c for c in cases)
    print(f"{len(names)} templates, {len(cases)} cases ({errors} raise), written to {out_file}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
