"""The OpenAI Agents SDK (`openai-agents`) in chat mode (`OpenAIChatCompletionsModel` on
an `AsyncOpenAI` with a base URL) and on its default model class, the Responses API
(`OpenAIResponsesModel`): an agent with one function tool runs its two-round tool
loop, `Runner.run` and `Runner.run_streamed`, through `llm-context serve` and directly,
each in front of a recording fake upstream on 127.0.0.1 (recording.py), and the bodies the
upstream got are compared: equal but for the read tool and `prompt_cache_key`. With the
tool answering a large result and serve under an offloading policy, they differ only at
the offloaded result too (`Runner.run` and `Runner.run_streamed`).

    LLM_CONTEXT_BIN=target/debug/llm-context \\
        …/agents-venv/bin/python -m unittest tests/agents/test_openai_agents.py

scripts/test.sh installs the SDK (pinned) in a venv outside the repository and runs this.
"""

import asyncio
import functools
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import recording as rec  # noqa: E402
from agents import (Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel,  # noqa: E402
                    Runner, function_tool, set_tracing_disabled)
from openai import AsyncOpenAI  # noqa: E402

# Nothing may reach the tracing backend (no network here, and none needed).
set_tracing_disabled(True)


@function_tool(name_override=rec.TOOL_NAME, description_override=rec.TOOL_DESCRIPTION)
def lookup_outage(ort: str, hinweis: str) -> str:
    """Looks up the state of an outage in a city.

    Args:
        ort: The city, e.g. Zürich.
        hinweis: A note for the log.
    """
    return rec.tool_result(ort, hinweis)


@function_tool(name_override=rec.TOOL_NAME, description_override=rec.TOOL_DESCRIPTION)
def lookup_outage_log(ort: str, hinweis: str) -> str:
    """Looks up the state of an outage in a city.

    Args:
        ort: The city, e.g. Zürich.
        hinweis: A note for the log.
    """
    return rec.large_tool_result(ort, hinweis)


def agent(client, tool, responses=False):
    # The SDK's default model class is the Responses one; chat mode is asked for.
    kind = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
    model = kind(model=rec.OPENAI_MODEL, openai_client=client)
    return Agent(name="Betrieb", instructions=rec.SYSTEM, tools=[tool], model=model)


def run(root, tool=lookup_outage, responses=False):
    async def go():
        async with AsyncOpenAI(base_url=f"{root}/v1", api_key=rec.CLIENT_OPENAI_KEY,
                               max_retries=0) as client:
            result = await Runner.run(agent(client, tool, responses), rec.PROMPT)
            return result.final_output
    return asyncio.run(go())


def run_streamed(root, tool=lookup_outage, responses=False):
    async def go():
        async with AsyncOpenAI(base_url=f"{root}/v1", api_key=rec.CLIENT_OPENAI_KEY,
                               max_retries=0) as client:
            result = Runner.run_streamed(agent(client, tool, responses), rec.PROMPT)
            async for _ in result.stream_events():
                pass
            return result.final_output
    return asyncio.run(go())


class OpenAiAgentsThroughServe(rec.ToolLoop):
    CASES = {"run": ("chat", run, False), "run_streamed": ("chat", run_streamed, True)}

    def test_run_completes(self):
        self.check_completed("run")

    def test_run_bodies(self):
        self.check_bodies("run")

    def test_run_streamed_completes(self):
        self.check_completed("run_streamed")

    def test_run_streamed_bodies(self):
        self.check_bodies("run_streamed")


class OpenAiAgentsResponsesThroughServe(rec.ToolLoop):
    """The SDK's default model class, `OpenAIResponsesModel`: the Responses API."""
    CASES = {"run": ("responses", functools.partial(run, responses=True), False),
             "run_streamed": ("responses", functools.partial(run_streamed, responses=True),
                              True)}

    def test_run_completes(self):
        self.check_completed("run")

    def test_run_bodies(self):
        self.check_bodies("run")

    def test_run_streamed_completes(self):
        self.check_completed("run_streamed")

    def test_run_streamed_bodies(self):
        self.check_bodies("run_streamed")


class OpenAiAgentsOffloadingThroughServe(rec.OffloadLoop):
    CASES = {"run": ("chat", functools.partial(run, tool=lookup_outage_log), False),
             "run_streamed": ("chat", functools.partial(run_streamed, tool=lookup_outage_log),
                              True)}

    def test_run_completes(self):
        self.check_completed("run")

    def test_run_differs_only_at_the_offloaded_result(self):
        self.check_offloaded("run")

    def test_run_offload_reported(self):
        self.check_reported("run")

    def test_run_streamed_completes(self):
        self.check_completed("run_streamed")

    def test_run_streamed_differs_only_at_the_offloaded_result(self):
        self.check_offloaded("run_streamed")

    def test_run_streamed_offload_reported(self):
        self.check_reported("run_streamed")


if __name__ == "__main__":
    unittest.main()
