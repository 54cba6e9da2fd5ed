"""LangChain's chat models, `ChatOpenAI` (langchain-openai, Chat Completions) and
`ChatAnthropic` (langchain-anthropic, Messages), each with one tool bound (`bind_tools`)
and a two-round tool loop written by hand (invoke, run the tool, invoke again with the
`ToolMessage`), `.invoke()` and `.stream()`, through `llm-context serve` and directly,
each in front of a recording fake upstream on 127.0.0.1 (recording.py), and the bodies the
upstream got compared: equal but for the stack's documented additions. With the tool
answering a large result and serve under an offloading policy, they differ only at the
offloaded result too (`.invoke()` on both).

    LLM_CONTEXT_BIN=target/debug/llm-context \\
        …/agents-venv/bin/python -m unittest tests/agents/test_langchain.py

scripts/test.sh installs LangChain (pinned) in a venv outside the repository and runs this.
"""

import functools
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import recording as rec  # noqa: E402
from langchain_anthropic import ChatAnthropic  # noqa: E402
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

TOOL = {"type": "function", "function": {"name": rec.TOOL_NAME,
                                         "description": rec.TOOL_DESCRIPTION,
                                         "parameters": rec.TOOL_SCHEMA}}


def loop(model, streamed, tool=rec.tool_result):
    """The two rounds by hand: the model's tool call, `tool` run, the model's answer."""
    chat = model.bind_tools([TOOL])
    messages = [SystemMessage(rec.SYSTEM), HumanMessage(rec.PROMPT)]

    def ask():
        if not streamed:
            return chat.invoke(messages)
        whole = None
        for chunk in chat.stream(messages):
            whole = chunk if whole is None else whole + chunk
        return whole

    reply = ask()
    messages.append(reply)
    for call in reply.tool_calls:
        messages.append(ToolMessage(tool(**call["args"]), tool_call_id=call["id"]))
    if not reply.tool_calls:
        return reply.text
    return ask().text


def openai(root, streamed, tool=rec.tool_result, responses=False):
    return loop(ChatOpenAI(base_url=f"{root}/v1", api_key=rec.CLIENT_OPENAI_KEY,
                           model=rec.OPENAI_MODEL, max_retries=0,
                           use_responses_api=responses), streamed, tool)


def anthropic(root, streamed, tool=rec.tool_result):
    return loop(ChatAnthropic(base_url=root, api_key=rec.CLIENT_ANTHROPIC_KEY,
                              model=rec.ANTHROPIC_MODEL, max_retries=0), streamed, tool)


class LangChainThroughServe(rec.ToolLoop):
    CASES = {
        "openai_invoke": ("chat", functools.partial(openai, streamed=False), False),
        "openai_stream": ("chat", functools.partial(openai, streamed=True), True),
        "anthropic_invoke": ("messages", functools.partial(anthropic, streamed=False), False),
        "anthropic_stream": ("messages", functools.partial(anthropic, streamed=True), True),
        "responses_invoke": ("responses",
                             functools.partial(openai, streamed=False, responses=True), False),
        "responses_stream": ("responses",
                             functools.partial(openai, streamed=True, responses=True), True),
    }

    def test_chat_openai_responses_api_invoke_completes(self):
        self.check_completed("responses_invoke")

    def test_chat_openai_responses_api_invoke_bodies(self):
        self.check_bodies("responses_invoke")

    def test_chat_openai_responses_api_stream_completes(self):
        self.check_completed("responses_stream")

    def test_chat_openai_responses_api_stream_bodies(self):
        self.check_bodies("responses_stream")

    def test_chat_openai_invoke_completes(self):
        self.check_completed("openai_invoke")

    def test_chat_openai_invoke_bodies(self):
        self.check_bodies("openai_invoke")

    def test_chat_openai_stream_completes(self):
        self.check_completed("openai_stream")

    def test_chat_openai_stream_bodies(self):
        self.check_bodies("openai_stream")

    def test_chat_anthropic_invoke_completes(self):
        self.check_completed("anthropic_invoke")

    def test_chat_anthropic_invoke_bodies(self):
        self.check_bodies("anthropic_invoke")

    def test_chat_anthropic_stream_completes(self):
        self.check_completed("anthropic_stream")

    def test_chat_anthropic_stream_bodies(self):
        self.check_bodies("anthropic_stream")


def large(client, streamed):
    return functools.partial(client, streamed=streamed, tool=rec.large_tool_result)


class LangChainOffloadingThroughServe(rec.OffloadLoop):
    CASES = {
        "openai_invoke": ("chat", large(openai, False), False),
        "anthropic_invoke": ("messages", large(anthropic, False), False),
    }

    def test_chat_openai_invoke_completes(self):
        self.check_completed("openai_invoke")

    def test_chat_openai_invoke_differs_only_at_the_offloaded_result(self):
        self.check_offloaded("openai_invoke")

    def test_chat_openai_invoke_offload_reported(self):
        self.check_reported("openai_invoke")

    def test_chat_anthropic_invoke_completes(self):
        self.check_completed("anthropic_invoke")

    def test_chat_anthropic_invoke_differs_only_at_the_offloaded_result(self):
        self.check_offloaded("anthropic_invoke")

    def test_chat_anthropic_invoke_offload_reported(self):
        self.check_reported("anthropic_invoke")


if __name__ == "__main__":
    unittest.main()
