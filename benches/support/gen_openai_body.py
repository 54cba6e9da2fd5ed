"""OpenAI-shaped bodies of the benchmark's growing session, beside the Claude Code ones
(gen_claude_code_body.py): the same seeded transcript, system prompt and tools, as an
OpenAI Agents SDK-shaped Chat Completions request and a Codex-shaped Responses request.

- `chat_body`: `model`, the system prompt as a `system` message, the transcript's messages
  as the SDK writes them (assistant `tool_calls` with JSON-text arguments and no `content`
  when there is no text, `tool` results with their `tool_call_id`), the tools as strict
  `function` tools with their JSON Schemas, and (streamed) `stream_options.include_usage`.
- `responses_body`: what Codex sends: `instructions`, `input` items (user `message`s with
  `input_text`, a `reasoning` item with `encrypted_content` before each assistant turn,
  assistant `message`s with `output_text`, `function_call` and `function_call_output`
  items), flat function tools, `reasoning`, `store: false`, `include`, and a
  `prompt_cache_key` per session.

Standard library only.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import gen_claude_code_body as cc

MODEL = "gpt-5.4"
SESSION = "019b1f0e-6c2a-7d31-9a4e-5b8c2d1f0a37"


def system_text() -> str:
    return "\n\n".join(block["text"] for block in cc.system_blocks())


def function_tools() -> list[dict[str, Any]]:
    """Claude Code's tools as (name, description, JSON Schema)."""
    return [(t["name"], t.get("description", ""), t["input_schema"]) for t in cc.tools()]


def transcript_messages(chat: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The first `count` non-system messages, ending before a trailing assistant one."""
    messages = [m for m in chat if m["role"] != "system"][:count]
    while messages and messages[-1]["role"] == "assistant":
        messages.pop()
    return messages


def chat_message(m: dict[str, Any]) -> dict[str, Any]:
    """A transcript message as the SDK writes it: the generator's own fields left out."""
    if m["role"] == "tool":
        return {"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]}
    if m["role"] == "assistant":
        out: dict[str, Any] = {"role": "assistant"}
        if m.get("content"):
            out["content"] = m["content"]
        if m.get("tool_calls"):
            out["tool_calls"] = m["tool_calls"]
        return out
    return {"role": m["role"], "content": m["content"]}


def chat_body(chat: list[dict[str, Any]], count: int, stream: bool) -> dict[str, Any]:
    messages = [{"role": "system", "content": system_text()}]
    messages += [chat_message(m) for m in transcript_messages(chat, count)]
    out: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "tools": [{"type": "function",
                   "function": {"name": name, "description": description,
                                "parameters": schema, "strict": True}}
                  for name, description, schema in function_tools()],
    }
    if stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def encrypted(seed: str) -> str:
    """An opaque reasoning blob of a realistic size (~1.4 KB), stable per seed."""
    digest = b"".join(hashlib.sha256(f"{seed}:{i}".encode()).digest() for i in range(32))
    return "gAAAAA" + base64.b64encode(digest).decode()


def responses_body(chat: list[dict[str, Any]], count: int, stream: bool) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for index, m in enumerate(transcript_messages(chat, count)):
        role = m["role"]
        if role == "user":
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": m["content"]}]})
        elif role == "assistant":
            items.append({"type": "reasoning", "summary": [],
                          "encrypted_content": encrypted(str(index))})
            if m.get("content"):
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": m["content"]}]})
            for call in m.get("tool_calls") or []:
                items.append({"type": "function_call", "call_id": call["id"],
                              "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]})
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": m["content"]})
    out: dict[str, Any] = {
        "model": MODEL,
        "instructions": system_text(),
        "input": items,
        "tools": [{"type": "function", "name": name, "description": description,
                   "strict": False, "parameters": schema}
                  for name, description, schema in function_tools()],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": SESSION,
    }
    return out
