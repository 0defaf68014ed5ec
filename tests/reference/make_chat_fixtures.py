#!/usr/bin/env python3
"""Builds the chat-template fixtures that the C++ renderer (src/moetune/text/chat_template.h) is checked against.

Writes tests/fixtures/chat_templates/:
  qwen3/     chat_template.jinja + tokenizer_config.json (special tokens)
  llama3_1/  tokenizer_config.json with the template inside, as Meta ships Llama-3.1
  gpt_oss/   chat_template.jinja + tokenizer_config.json
  cases.json conversations (messages, add_generation_prompt, extra kwargs) and what transformers renders for
             each, byte for byte, plus small Jinja snippets covering single features.

The three templates are not downloaded (nothing here reaches the network): they are written out below following
the structure and the Jinja constructs of the templates those models ship (Qwen3's <think> splitting,
enable_thinking and ns.multi_step_tool; Llama-3.1's date_string, tools in the first user message, ipython role and
builtin tools; GPT-OSS's harmony format with channels, developer message, reasoning effort and TypeScript-style
tool namespaces). The expected outputs are rendered by transformers' own code path, render_jinja_template (the
function apply_chat_template calls), with the special tokens of each tokenizer_config.json. strftime_now is pinned
to FIXED_TIME so that the date the GPT-OSS template prints is reproducible.

Run:  /work/refenv/bin/python tests/reference/make_chat_fixtures.py tests/fixtures/chat_templates
Needs transformers v5 and jinja2 (recorded in cases.json).
"""
import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

FIXED_TIME = datetime(2025, 8, 5, 14, 30, 0)

QWEN3_TEMPLATE = r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
'''

LLAMA3_1_TEMPLATE = r'''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''

GPT_OSS_TEMPLATE = r'''{#-
  In addition to the normal inputs of `messages` and `tools`, this template also accepts the
  following kwargs:
  - "builtin_tools": A list, can contain "browser" and/or "python".
  - "model_identity": A string that optionally describes the model identity.
  - "reasoning_effort": A string that describes the reasoning effort, defaults to "medium".
 #}

{#- Tool Definition Rendering ============================================== #}
{%- macro render_typescript_type(param_spec, required_params, is_nullable=false) -%}
    {%- if param_spec.type == "array" -%}
        {%- if param_spec['items'] -%}
            {%- if param_spec['items']['type'] == "string" -%}
                {{- "string[]" }}
            {%- elif param_spec['items']['type'] == "number" -%}
                {{- "number[]" }}
            {%- elif param_spec['items']['type'] == "integer" -%}
                {{- "number[]" }}
            {%- elif param_spec['items']['type'] == "boolean" -%}
                {{- "boolean[]" }}
            {%- else -%}
                {%- set inner_type = render_typescript_type(param_spec['items'], required_params) -%}
                {%- if inner_type == "object | object" or inner_type|length > 50 -%}
                    {{- "any[]" }}
                {%- else -%}
                    {{- inner_type + "[]" }}
                {%- endif -%}
            {%- endif -%}
            {%- if param_spec.nullable -%}
                {{- " | null" }}
            {%- endif -%}
        {%- else -%}
            {{- "any[]" }}
            {%- if param_spec.nullable -%}
                {{- " | null" }}
            {%- endif -%}
        {%- endif -%}
    {%- elif param_spec.type is defined and param_spec.type is iterable and param_spec.type is not string and param_spec.type is not mapping and param_spec.type[0] is defined -%}
        {#- Handle array of types like ["object", "object"] from Union[dict, list] #}
        {%- if param_spec.type | length > 1 -%}
            {{- param_spec.type | join(" | ") }}
        {%- else -%}
            {{- param_spec.type[0] }}
        {%- endif -%}
    {%- elif param_spec.oneOf -%}
        {#- Handle oneOf schemas - check for complex unions and fallback to any #}
        {%- set has_object_variants = false -%}
        {%- for variant in param_spec.oneOf -%}
            {%- if variant.type == "object" -%}
                {%- set has_object_variants = true -%}
            {%- endif -%}
        {%- endfor -%}
        {%- if has_object_variants and param_spec.oneOf|length > 1 -%}
            {{- "any" }}
        {%- else -%}
            {%- for variant in param_spec.oneOf -%}
                {{- render_typescript_type(variant, required_params) -}}
                {%- if variant.description %}
                    {{- "// " + variant.description }}
                {%- endif -%}
                {%- if variant.default is defined %}
                    {{ "// default: " + variant.default|tojson }}
                {%- endif -%}
                {%- if not loop.last %}
                    {{- " | " }}
                {% endif -%}
            {%- endfor -%}
        {%- endif -%}
    {%- elif param_spec.type == "string" -%}
        {%- if param_spec.enum -%}
            {{- '"' + param_spec.enum|join('" | "') + '"' -}}
        {%- else -%}
            {{- "string" }}
            {%- if param_spec.nullable %}
                {{- " | null" }}
            {%- endif -%}
        {%- endif -%}
    {%- elif param_spec.type == "number" -%}
        {{- "number" }}
    {%- elif param_spec.type == "integer" -%}
        {{- "number" }}
    {%- elif param_spec.type == "boolean" -%}
        {{- "boolean" }}

    {%- elif param_spec.type == "object" -%}
        {%- if param_spec.properties -%}
            {{- "{\n" }}
            {%- for prop_name, prop_spec in param_spec.properties.items() -%}
                {{- prop_name -}}
                {%- if prop_name not in (param_spec.required or []) -%}
                    {{- "?" }}
                {%- endif -%}
                {{- ": " }}
                {{ render_typescript_type(prop_spec, param_spec.required or []) }}
                {%- if not loop.last -%}
                    {{-", " }}
                {%- endif -%}
            {%- endfor -%}
            {{- "}" }}
        {%- else -%}
            {{- "object" }}
        {%- endif -%}
    {%- else -%}
        {{- "any" }}
    {%- endif -%}
{%- endmacro -%}

{%- macro render_tool_namespace(namespace_name, tools) -%}
    {{- "## " + namespace_name + "\n\n" }}
    {{- "namespace " + namespace_name + " {\n\n" }}
    {%- for tool in tools %}
        {%- set tool = tool.function %}
        {{- "// " + tool.description + "\n" }}
        {{- "type "+ tool.name + " = " }}
        {%- if tool.parameters and tool.parameters.properties %}
            {{- "(_: {\n" }}
            {%- for param_name, param_spec in tool.parameters.properties.items() %}
                {%- if param_spec.description %}
                    {{- "// " + param_spec.description + "\n" }}
                {%- endif %}
                {{- param_name }}
                {%- if param_name not in (tool.parameters.required or []) -%}
                    {{- "?" }}
                {%- endif -%}
                {{- ": " }}
                {{- render_typescript_type(param_spec, tool.parameters.required or []) }}
                {%- if param_spec.default is defined -%}
                    {%- if param_spec.enum %}
                        {{- ", // default: " + param_spec.default }}
                    {%- elif param_spec.oneOf %}
                        {{- "// default: " + param_spec.default }}
                    {%- else %}
                        {{- ", // default: " + param_spec.default|tojson }}
                    {%- endif -%}
                {%- endif -%}
                {%- if not loop.last %}
                    {{- ",\n" }}
                {%- else %}
                    {{- ",\n" }}
                {%- endif -%}
            {%- endfor %}
            {{- "}) => any;\n\n" }}
        {%- else -%}
            {{- "() => any;\n\n" }}
        {%- endif -%}
    {%- endfor %}
    {{- "} // namespace " + namespace_name }}
{%- endmacro -%}

{%- macro render_builtin_tools(browser_tool, python_tool) -%}
    {%- if browser_tool %}
        {{- "## browser\n\n" }}
        {{- "// Tool for browsing.\n" }}
        {{- "// The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n" }}
        {{- "// Cite information from the tool using the following format:\n" }}
        {{- "// `【{cursor}†L{line_start}(-L{line_end})?】`, for example: `【6†L9-L11】` or `【8†L3】`.\n" }}
        {{- "// Do not quote more than 10 words directly from the tool output.\n" }}
        {{- "// sources=web (default: web)\n" }}
        {{- "namespace browser {\n\n" }}
        {{- "// Searches for information related to `query` and displays `topn` results.\n" }}
        {{- "type search = (_: {\n" }}
        {{- "query: string,\n" }}
        {{- "topn?: number, // default: 10\n" }}
        {{- "source?: string,\n" }}
        {{- "}) => any;\n\n" }}
        {{- "// Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, showing `num_lines` lines.\n" }}
        {{- "// Valid link ids are displayed with the formatting: `【{id}†.*】`.\n" }}
        {{- "// If `cursor` is not provided, the most recent page is implied.\n" }}
        {{- "// If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n" }}
        {{- "// If `loc` is not provided, the viewport will be positioned at the beginning of the document or centered on the most relevant passage, if available.\n" }}
        {{- "// Use this function without `id` to scroll to a new location of an opened page.\n" }}
        {{- "type open = (_: {\n" }}
        {{- "id?: number | string, // default: -1\n" }}
        {{- "cursor?: number, // default: -1\n" }}
        {{- "loc?: number, // default: -1\n" }}
        {{- "num_lines?: number, // default: -1\n" }}
        {{- "view_source?: boolean, // default: false\n" }}
        {{- "source?: string,\n" }}
        {{- "}) => any;\n\n" }}
        {{- "// Finds exact matches of `pattern` in the current page, or the page given by `cursor`.\n" }}
        {{- "type find = (_: {\n" }}
        {{- "pattern: string,\n" }}
        {{- "cursor?: number, // default: -1\n" }}
        {{- "}) => any;\n\n" }}
        {{- "} // namespace browser\n\n" }}
    {%- endif -%}

    {%- if python_tool %}
        {{- "## python\n\n" }}
        {{- "Use this tool to execute Python code in your chain of thought. The code will not be shown to the user. This tool should be used for internal reasoning, but not for code that is intended to be visible to the user (e.g. when creating plots, tables, or files).\n\n" }}
        {{- "When you send a message containing Python code to python, it will be executed in a stateful Jupyter notebook environment. python will respond with the output of the execution or time out after 120.0 seconds. The drive at '/mnt/data' can be used to save and persist user files. Internet access for this session is UNKNOWN. Depends on the cluster.\n\n" }}
    {%- endif -%}
{%- endmacro -%}

{#- System Message Construction ============================================ #}
{%- macro build_system_message() -%}
    {%- if model_identity is not defined %}
        {%- set model_identity = "You are ChatGPT, a large language model trained by OpenAI." %}
    {%- endif %}
    {{- model_identity + "\n" }}
    {{- "Knowledge cutoff: 2024-06\n" }}
    {{- "Current date: " + strftime_now("%Y-%m-%d") + "\n\n" }}
    {%- if reasoning_effort is not defined %}
        {%- set reasoning_effort = "medium" %}
    {%- endif %}
    {{- "Reasoning: " + reasoning_effort + "\n\n" }}
    {%- if builtin_tools %}
        {{- "# Tools\n\n" }}
        {%- set available_builtin_tools = namespace(browser=false, python=false) %}
        {%- for tool in builtin_tools %}
            {%- if tool == "browser" %}
                {%- set available_builtin_tools.browser = true %}
            {%- elif tool == "python" %}
                {%- set available_builtin_tools.python = true %}
            {%- endif %}
        {%- endfor %}
        {{- render_builtin_tools(available_builtin_tools.browser, available_builtin_tools.python) }}
    {%- endif -%}
    {{- "# Valid channels: analysis, commentary, final. Channel must be included for every message." }}
    {%- if tools -%}
        {{- "\nCalls to these tools must go to the commentary channel: 'functions'." }}
    {%- endif -%}
{%- endmacro -%}

{#- Main Template Logic ================================================= #}
{#- Set defaults #}

{#- Render system message #}
{{- "<|start|>system<|message|>" }}
{{- build_system_message() }}
{{- "<|end|>" }}

{#- Extract developer message #}
{%- if messages[0].role == "developer" or messages[0].role == "system" %}
    {%- set developer_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set developer_message = "" %}
    {%- set loop_messages = messages %}
{%- endif %}

{#- Render developer message #}
{%- if developer_message or tools %}
    {{- "<|start|>developer<|message|>" }}
    {%- if developer_message %}
        {{- "# Instructions\n\n" }}
        {{- developer_message }}
        {{- "\n\n" }}
    {%- endif %}
    {%- if tools -%}
        {{- "# Tools\n\n" }}
        {{- render_tool_namespace("functions", tools) }}
    {%- endif -%}
    {{- "<|end|>" }}
{%- endif %}

{#- Render messages #}
{%- set last_tool_call = namespace(name=none) %}
{%- for message in loop_messages -%}
    {#- At this point only assistant/user/tool messages should remain #}
    {%- if message.role == 'assistant' -%}
        {#- Checks to ensure the messages are being passed in the format we expect #}
        {%- if "content" in message %}
            {%- if "<|channel|>analysis<|message|>" in message.content or "<|channel|>final<|message|>" in message.content %}
                {{- raise_exception("You have passed a message containing <|channel|> tags in the content field. Instead of doing this, you should pass analysis messages (the string between '<|message|>' and '<|end|>') in the 'thinking' field, and final messages (the string between '<|message|>' and '<|end|>') in the 'content' field.") }}
            {%- endif %}
        {%- endif %}
        {%- if "thinking" in message %}
            {%- if "<|channel|>analysis<|message|>" in message.thinking or "<|channel|>final<|message|>" in message.thinking %}
                {{- raise_exception("You have passed a message containing <|channel|> tags in the thinking field. Instead of doing this, you should pass analysis messages (the string between '<|message|>' and '<|end|>') in the 'thinking' field, and final messages (the string between '<|message|>' and '<|end|>') in the 'content' field.") }}
            {%- endif %}
        {%- endif %}
        {%- if "tool_calls" in message %}
            {#- We need very careful handling here - we want to drop the tool call analysis message if the model #}
            {#- has output a later <|final|> message, but otherwise we want to retain it. This is the only case #}
            {#- when we render CoT/analysis messages in inference. #}
            {%- set future_final_message = namespace(found=false) %}
            {%- for future_message in loop_messages[loop.index:] %}
                {%- if future_message.role == 'assistant' and "tool_calls" not in future_message %}
                    {%- set future_final_message.found = true %}
                {%- endif %}
            {%- endfor %}
            {#- We assume max 1 tool call per message, and so we infer the tool call name #}
            {#- in "tool" messages from the most recent assistant tool call name #}
            {%- set tool_call = message.tool_calls[0] %}
            {%- if tool_call.function %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {%- if message.content and message.thinking %}
                {{- raise_exception("Cannot pass both content and thinking in an assistant message with tool calls! Put the analysis message in one or the other, but not both.") }}
            {%- elif message.content and not future_final_message.found %}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.content + "<|end|>" }}
            {%- elif message.thinking and not future_final_message.found %}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}
            {%- endif %}
            {{- "<|start|>assistant to=" }}
            {{- "functions." + tool_call.name + "<|channel|>commentary " }}
            {{- (tool_call.content_type if tool_call.content_type is defined else "json") + "<|message|>" }}
            {{- tool_call.arguments|tojson }}
            {{- "<|call|>" }}
            {%- set last_tool_call.name = tool_call.name %}
        {%- elif loop.last and not add_generation_prompt %}
            {#- Only render the CoT if the final turn is an assistant turn and add_generation_prompt is false #}
            {#- This is a situation that should only occur in training, never in inference. #}
            {%- if "thinking" in message %}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}
            {%- endif %}
            {#- <|return|> indicates the end of generation, but <|end|> does not #}
            {#- <|return|> should never be an input to the model, but we include it as the final token #}
            {#- when training, so the model learns to emit it. #}
            {{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|return|>" }}
        {%- else %}
            {#- CoT is dropped during all previous turns, so we never render it for inference #}
            {{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|end|>" }}
            {%- set last_tool_call.name = none %}
        {%- endif %}
    {%- elif message.role == 'tool' -%}
        {%- if last_tool_call.name is none %}
            {{- raise_exception("Message has tool role, but there was no previous assistant message with a tool call!") }}
        {%- endif %}
        {{- "<|start|>functions." + last_tool_call.name }}
        {{- " to=assistant<|channel|>commentary<|message|>" + message.content|tojson + "<|end|>" }}
    {%- elif message.role == 'user' -%}
        {{- "<|start|>user<|message|>" + message.content + "<|end|>" }}
    {%- endif -%}
{%- endfor -%}

{#- Generation prompt #}
{%- if add_generation_prompt -%}
<|start|>assistant
{%- endif -%}
'''

# ---- shared conversation pieces ----

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and country, e.g. Zürich, Switzerland"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "description": "How many days to forecast", "default": 1},
            },
            "required": ["location"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_documents",
        "description": "Search the document store",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}, "nullable": True},
                "scores": {"type": "array", "items": {"type": "number"}},
                "filters": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"field": {"type": "string"}, "value": {"type": "string"}},
                              "required": ["field"]},
                },
                "limit": {"oneOf": [{"type": "integer", "description": "a count"}, {"type": "string"}]},
                "mode": {"type": ["string", "null"]},
                "exact": {"type": "boolean", "default": False},
                "options": {"type": "object"},
                "threshold": {"type": "number", "default": 0.5},
            },
            "required": ["query", "filters"],
        },
    },
}

NO_ARGS_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The current UTC time"}}


def weather_call(arguments):
    return {"type": "function", "function": {"name": "get_current_weather", "arguments": arguments}}


QWEN3_CASES = [
    dict(name="system_and_user", add_generation_prompt=True, messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Give me a short introduction to large language models."}]),
    dict(name="multi_turn_think_in_content", add_generation_prompt=True, messages=[
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n2+2 = 4."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\nAgain simple.\n</think>\n\n3+3 = 6."},
        {"role": "user", "content": "Thanks! Ünïcödé → 你好 🙂"}]),
    dict(name="reasoning_content_training", add_generation_prompt=False, messages=[
        {"role": "system", "content": "Be concise."},
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "reasoning_content": "\nRayleigh scattering favours short wavelengths.\n",
         "content": "\n\nBecause air scatters blue light more than red light."}]),
    dict(name="tools_and_tool_responses", add_generation_prompt=False,
         extra={"tools": [WEATHER_TOOL, NO_ARGS_TOOL]}, messages=[
        {"role": "system", "content": "You can check the weather."},
        {"role": "user", "content": "Weather in Paris and Zürich?"},
        {"role": "assistant", "content": "<think>\nTwo cities, two calls.\n</think>\n\nLet me check.",
         "tool_calls": [weather_call({"location": "Paris, France", "unit": "celsius"}),
                        {"name": "get_current_weather", "arguments": "{\"location\": \"Zürich\"}"}]},
        {"role": "tool", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
        {"role": "tool", "content": "{\"temperature\": 18, \"sky\": \"cloudy\"}"},
        {"role": "assistant", "reasoning_content": "Both answers are in.",
         "content": "Paris: 21.5 °C and clear. Zürich: 18 °C and cloudy."}]),
    dict(name="enable_thinking_false", add_generation_prompt=True, extra={"enable_thinking": False}, messages=[
        {"role": "user", "content": "Say hi."}]),
    dict(name="multi_step_tool_no_system", add_generation_prompt=True,
         extra={"tools": [WEATHER_TOOL], "enable_thinking": True}, messages=[
        {"role": "user", "content": "Is it raining in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [weather_call({"location": "Oslo, Norway"})]},
        {"role": "tool", "content": "<tool_response>rain</tool_response>"},
        {"role": "user", "content": "<tool_response>\nlight rain, 9 °C\n</tool_response>"},
        {"role": "assistant", "content": "Yes, light rain.", "tool_calls": [weather_call({"location": "Bergen", "days": 2})]},
        {"role": "tool", "content": "heavy rain"}]),
]

LLAMA3_1_CASES = [
    dict(name="system_and_user", add_generation_prompt=True, messages=[
        {"role": "system", "content": "  You are a pirate chatbot.  \n"},
        {"role": "user", "content": "Who are you?"}]),
    dict(name="multi_turn_no_system", add_generation_prompt=False, messages=[
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": " General Kenobi! "},
        {"role": "user", "content": "Naïve café?"},
        {"role": "assistant", "content": "Oui."}]),
    dict(name="tools_in_user_message", add_generation_prompt=True,
         extra={"tools": [WEATHER_TOOL]}, messages=[
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "tool_calls": [weather_call({"location": "Paris, France"})]},
        {"role": "tool", "content": {"temperature": 22.0, "unit": "celsius", "ok": True}},
        {"role": "tool", "content": "22 degrees"},
        {"role": "assistant", "content": "It is 22 °C in Paris."},
        {"role": "user", "content": "Thanks"}]),
    dict(name="tools_in_system_with_date", add_generation_prompt=True,
         extra={"tools": [WEATHER_TOOL, SEARCH_TOOL], "tools_in_user_message": False, "date_string": "05 Aug 2025"},
         messages=[{"role": "user", "content": "Find documents about rain."}]),
    dict(name="builtin_tools", add_generation_prompt=False,
         extra={"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}, messages=[
        {"role": "system", "content": "You are a research assistant."},
        {"role": "user", "content": "Search for the current weather in Menlo Park."},
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {
            "name": "brave_search", "arguments": {"query": "weather Menlo Park", "count": "3"}}}]},
        {"role": "ipython", "content": "sunny, 25 °C"},
        {"role": "assistant", "content": "It is sunny."}]),
    dict(name="two_tool_calls_raise", add_generation_prompt=True, extra={"tools": [WEATHER_TOOL]},
         expected_error="This model only supports single tool-calls at once!", messages=[
        {"role": "user", "content": "Weather in Rome and Oslo?"},
        {"role": "assistant", "tool_calls": [weather_call({"location": "Rome"}), weather_call({"location": "Oslo"})]}]),
]

GPT_OSS_CASES = [
    dict(name="system_and_user", add_generation_prompt=True, messages=[
        {"role": "system", "content": "Always answer in rhymes."},
        {"role": "user", "content": "What is the weather like in SF?"}]),
    dict(name="multi_turn_drops_old_thinking", add_generation_prompt=True, extra={"reasoning_effort": "high"}, messages=[
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "thinking": "Easy.", "content": "4"},
        {"role": "user", "content": "And 3+3?"}]),
    dict(name="training_final_turn_with_thinking", add_generation_prompt=False,
         extra={"reasoning_effort": "low", "model_identity": "You are a tiny test model."}, messages=[
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "Capital of Norway?"},
        {"role": "assistant", "thinking": "Oslo is the capital.", "content": "Oslo."}]),
    dict(name="tool_call_and_final_answer", add_generation_prompt=False,
         extra={"tools": [WEATHER_TOOL, SEARCH_TOOL, NO_ARGS_TOOL], "builtin_tools": ["browser", "python"]}, messages=[
        {"role": "user", "content": "Weather in Tokyo?"},
        {"role": "assistant", "thinking": "I should call the weather tool.",
         "tool_calls": [weather_call({"location": "Tokyo, Japan", "unit": "celsius"})]},
        {"role": "tool", "content": "{\"temperature\": 30}"},
        {"role": "assistant", "thinking": "30 degrees.", "content": "It is 30 °C in Tokyo."}]),
    dict(name="tool_call_pending_keeps_analysis", add_generation_prompt=True, extra={"tools": [WEATHER_TOOL]}, messages=[
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "Weather in Lima?"},
        {"role": "assistant", "content": "Need the weather tool.",
         "tool_calls": [{"name": "get_current_weather", "arguments": {"location": "Lima"}, "content_type": "json"}]},
        {"role": "tool", "content": "sunny"}]),
    dict(name="channel_tags_in_content_raise", add_generation_prompt=False,
         expected_error="You have passed a message containing <|channel|> tags in the content field.", messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<|channel|>final<|message|>Hello"}]),
]

TEMPLATES = {
    "qwen3": dict(template=QWEN3_TEMPLATE, in_tokenizer_config=False, cases=QWEN3_CASES,
                  special_tokens={"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                  "unk_token": None}),
    "llama3_1": dict(template=LLAMA3_1_TEMPLATE, in_tokenizer_config=True, cases=LLAMA3_1_CASES,
                     special_tokens={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "gpt_oss": dict(template=GPT_OSS_TEMPLATE, in_tokenizer_config=False, cases=GPT_OSS_CASES,
                    special_tokens={"bos_token": "<|startoftext|>", "eos_token": "<|return|>",
                                    "pad_token": "<|endoftext|>"}),
}

# Single Jinja features, each rendered by transformers' environment; the C++ suite checks each byte for byte.
SNIPPETS = [
    ("whitespace_trim_and_lstrip", "  {% if true %}\n  x\n  {% endif %}\n  y {# c #}\nz\n", {}),
    ("whitespace_minus", "a  {%- if true -%}  b  {%- endif -%}  c\n{{- ' d ' -}}\n e", {}),
    ("whitespace_plus", "  {%+ if true %}x{% endif +%}\n  {#+ c #}y", {}),
    ("raw_block", "a\n  {% raw %}\n x {{ y }}\n  {% endraw %}\nb", {}),
    ("comment_minus", "a\n  {#- gone -#}\n  b", {}),
    ("crlf_and_trailing_newline", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("loop_variables", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a', 'b') }};"
     "{% endfor %}", {"xs": ["p", "q", "r"]}),
    ("loop_filter_else_and_controls", "{% for i in range(10) if i % 3 %}{% if i > 7 %}{% break %}{% endif %}"
     "{% if i == 4 %}{% continue %}{% endif %}{{ i }}/{{ loop.length }} {% endfor %}"
     "{% for x in [] %}no{% else %}empty{% endfor %}{% for x in none_given %}no{% else %}undef{% endfor %}", {}),
    ("loop_unpacking_and_scope", "{% set x = 'outer' %}{% for k, v in d.items() %}{% set x = k %}{{ k }}={{ v }},"
     "{% endfor %}{{ x }}|{% for k, v in d|items %}{{ k }}{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}",
     {"d": {"b": 1, "a": [1, 2]}}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
     "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns.missing is defined }}", {}),
    ("macro_call_and_caller", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{{ varargs|list }}{{ kwargs }}"
     "{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }} {{ greet('d', ',', 1) }}"
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
     "{% call wrap('b') %}inside {{ 1 + 1 }}{% endcall %}"
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
     {}),
    ("set_block_and_with", "{% set t %}x{{ 1 }}y{% endset %}[{{ t }}]{% with a = 2, b = 3 %}{{ a * b }}{% endwith %}"
     "{{ a is defined }}{% set p, q = [1, 2] %}{{ p }}{{ q }}{% set tup = 1, 2 %}{{ tup|length }}", {}),
    ("string_filters", "{{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'MiXed'|upper }}{{ 'MiXed'|lower }}|"
     "{{ 'hello world'|capitalize }}|{{ \"it's a-b (c) x\"|title }}|{{ 'a-b'|replace('-', '+') }}|"
     "{{ 'aaa'|replace('a', 'b', 2) }}|{{ 42|string ~ '!' }}|{{ 'abc'|reverse }}|{{ '<a href=\"x\">'|e }}|"
     "{{ 'ß straße ǅ'|upper }}|{{ 'line1\nline2\n\nline4'|indent(2) }}|{{ 'a\nb'|indent(2, first=true) }}", {}),
    ("number_filters", "{{ '42'|int }} {{ '42.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ true|int }} "
     "{{ '2.5'|float }} {{ 'x'|float }} {{ -3|abs }} {{ [3, 1, 2]|sum }} {{ [1.5, 2]|sum }} {{ [3, 1, 2]|min }} "
     "{{ ['b', 'A', 'c']|max }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} "
     "{{ 2 ** -1 }} {{ 5.5 // 2 }} {{ -5.5 % 2 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 1.0 }} "
     "{{ 3 * 'ab' }} {{ [1] * 2 }} {{ 1_000 + 1 }}", {}),
    ("sequence_filters", "{{ xs|length }} {{ xs|count }} {{ xs|first }} {{ xs|last }} {{ xs|join(', ') }} "
     "{{ xs|reverse|list }} {{ xs|sort }} {{ xs|sort(reverse=true) }} {{ ['b', 'A', 'a', 'B']|sort }} "
     "{{ ['b', 'A', 'a', 'B']|unique|list }} {{ 'abc'|list }} {{ d|list }} {{ d|length }} {{ ''|first is defined }} "
     "{{ users|map(attribute='name')|join('/') }} {{ users|map(attribute='age', default=0)|list }} "
     "{{ users|selectattr('age')|map(attribute='name')|list }} {{ users|rejectattr('age')|list|length }} "
     "{{ users|selectattr('name', 'equalto', 'bo')|list }} {{ [1, 2, 3, 4]|select('odd')|list }} "
     "{{ [1, 2, 3, 4]|reject('divisibleby', 2)|list }} {{ ['a', 'b']|map('upper')|join }} "
     "{{ users|sort(attribute='name')|map(attribute='name')|list }} {{ [0, '', none, 1]|select|list }} "
     "{{ users|join(', ', attribute='name') }} {{ none|map('string')|list }} {{ [1, 2, 1].count(1) }} "
     "{{ ['a', 'b'].index('b') }}",
     {"xs": [3, 1, 2], "d": {"k1": 1, "k2": 2},
      "users": [{"name": "al", "age": 30}, {"name": "bo"}, {"name": "Cy", "age": 0}]}),
    ("default_filter", "{{ missing|default('dflt') }} {{ missing|d('d2') }} {{ ''|default('empty') }} "
     "{{ ''|default('empty', true) }} {{ none|default('n') }} {{ 0|default(5, boolean=true) }}", {}),
    ("tojson", "{{ v|tojson }}\n{{ v|tojson(indent=2) }}\n{{ v|tojson(separators=(',', ':')) }}\n"
     "{{ v|tojson(sort_keys=true) }}\n{{ v|tojson(ensure_ascii=true) }}\n{{ [] |tojson(indent=2) }} {{ {}|tojson }} "
     "{{ 'a\"b\\\\c\\n\\t\\u0001'|tojson }} {{ 1.0|tojson }} {{ 1e20|tojson }}",
     {"v": {"z": 1, "a": [1.5, 2, None, True, False, "é\u2028😀"], "m": {"x": {}}}}),
    ("tests", "{{ 'a' is string }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ 1.0 is float }} "
     "{{ true is boolean }} {{ 1 is true }} {{ true is true }} {{ false is false }} {{ none is none }} "
     "{{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ missing is iterable }} {{ 1 is iterable }} "
     "{{ {} is sequence }} {{ 'x' is sequence }} {{ missing is defined }} {{ missing is undefined }} "
     "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is in 'cat' }} {{ 2 is in [1, 2] }} "
     "{{ 'ab' is lower }} {{ 'AB' is upper }} {{ 1 is eq 1.0 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is ge 2 }} "
     "{{ 1 is not string }} {{ none is sameas none }} {{ 'trim' is filter }} {{ 'odd' is test }} {{ range is callable }} "
     "{{ 3.0 is odd }} {{ 2.5 is odd }} {{ 2.5 is even }} {{ 7.5 is divisibleby 2.5 }}",
     {}),
    ("operators", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} "
     "{{ true == 1 }} {{ 'a' in 'cat' }} {{ 'x' not in ['a'] }} {{ 'k' in {'k': 1} }} {{ not 0 }} {{ 0 or [] }} "
     "{{ 1 and 'x' }} {{ none or 'fallback' }} {{ 'yes' if 1 else 'no' }} [{{ 'x' if false }}] {{ 1 ~ 2 ~ none }} "
     "{{ -3 + +2 }} {{ (1 + 2) * 3 }} {{ 2 * 3 + 4 }} {{ (2 + 3) ~ 4 }} {{ 1 ~ 2 * 3 }} {{ 'a' 'b' }} {{ [1, 2] + [3] }} "
     "{{ {'a': 1} == {'a': 1.0} }} {{ missing == missing }} {{ none == false }}", {}),
    ("subscripts_and_slices", "{{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[::2] }} "
     "{{ xs[-2:] }} {{ xs[5:] }} {{ xs[1:-1] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }} {{ 'abc'[-1] }} "
     "{{ d['k'] }} {{ d.k }} {{ d.get('k') }} {{ d.get('zz') }} {{ d.get('zz', 'dv') }} {{ d.keys()|list }} "
     "{{ d.values()|list }} {{ d.items()|list|length }} {{ xs.0 }} [{{ xs[10] }}] [{{ d.zz }}] {{ d['items'] }}",
     {"xs": [10, 20, 30, 40], "d": {"k": "v", "items": "key named items"}}),
    ("string_methods", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} "
     "{{ 'a,b,c'.rsplit(',', 1) }} {{ ' a  b '.split(none, 1) }} {{ ' a  b '.rsplit(none, 1) }} "
     "{{ 'a\u3000b\u00a0'.split() }} {{ '\u00a0x\u00a0'.strip() }} {{ 'xxhixx'.strip('x') }} "
     "{{ '\\n\\nhi\\n'.lstrip('\\n') }}|{{ 'hi\\n\\n'.rstrip() }}|{{ 'Hello world'.startswith('Hell') }} "
     "{{ 'Hello'.endswith(('x', 'lo')) }} {{ 'aaa'.replace('a', 'b') }} {{ 'ab'.replace('', '-') }} "
     "{{ 'they\\'re bill\\'s'.title() }} {{ 'hELLO'.capitalize() }} {{ 'Abc'.upper() }}{{ 'Abc'.lower() }} "
     "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'héllo'.find('l') }} {{ 'hello'.count('l') }} "
     "{{ '-'.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ '  '.isspace() }} "
     "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'a</think>b</think>c'.split('</think>')[-1] }}", {}),
    ("printing_values", "{{ none }} {{ true }} {{ [1, 'a', none, true, {'k': 'v\"'}] }} {{ {'a': 1.5} }} "
     "{{ \"it's\" }} {{ ['it\\'s', 'q\"'] }} {{ ns }} [{{ missing }}] {{ 10000000000000000.0 }} {{ 1.5 }}",
     {"ns": None}),
    ("string_escapes", "{{ '\\x41\\u00e9\\n\\q\\101' }}|{{ \"tab\\tquote\\\"\" }}", {}),
]


def render(template, messages, add_generation_prompt, special_tokens, extra):
    extra = dict(extra)
    tools = extra.pop("tools", None)
    kwargs = {k: v for k, v in special_tokens.items() if v is not None}
    kwargs.update(extra)
    rendered, _ = render_jinja_template(
        conversations=[messages], tools=tools, chat_template=template, add_generation_prompt=add_generation_prompt,
        strftime_now=lambda fmt: FIXED_TIME.strftime(fmt), **kwargs)
    return rendered[0]


def render_snippet(template, variables):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    return _compile_jinja_template(template).render(**variables)


def main(out_dir):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = []
    for folder, spec in TEMPLATES.items():
        path = out_dir / folder
        path.mkdir(exist_ok=True)
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072}
        config.update(spec["special_tokens"])
        if spec["in_tokenizer_config"]:
            config["chat_template"] = spec["template"]
        else:
            (path / "chat_template.jinja").write_text(spec["template"], encoding="utf-8")
        (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                    encoding="utf-8")
        for case in spec["cases"]:
            record = {"template": folder, "name": case["name"], "messages": case["messages"],
                      "add_generation_prompt": case["add_generation_prompt"], "extra": case.get("extra", {})}
            try:
                record["expected"] = render(spec["template"], case["messages"], case["add_generation_prompt"],
                                            spec["special_tokens"], case.get("extra", {}))
                assert "expected_error" not in case, f"{folder}/{case['name']} rendered but should raise"
            except jinja2.exceptions.TemplateError as error:
                assert case.get("expected_error", "<none>") in str(error), f"{folder}/{case['name']}: {error}"
                record["expected_error"] = str(error)
            cases.append(record)
    snippets = [{"name": name, "template": template, "variables": variables,
                 "expected": render_snippet(template, variables)} for name, template, variables in SNIPPETS]
    document = {
        "made_with": {"transformers": transformers.__version__, "jinja2": jinja2.__version__},
        "fixed_time": FIXED_TIME.isoformat(),
        "cases": cases,
        "snippets": snippets,
    }
    (out_dir / "cases.json").write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases and {len(snippets)} snippets to {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/chat_templates")
