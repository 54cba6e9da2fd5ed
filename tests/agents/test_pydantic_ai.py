"""pydantic-ai (`pydantic-ai-slim[openai,anthropic]`): an `Agent` with one tool runs its
two-round tool loop, `agent.run` and `agent.run_stream_events`, on `OpenAIChatModel` (Chat
Completions, an `OpenAIProvider` with a base URL) and on `AnthropicModel` (Messages, an
`AnthropicProvider` with a base URL), through `llm-context serve` and directly, each in
front of a recording fake upstream on 127.0.0.1 (recording.py), and the bodies the
upstream got compared: equal but for the stack's documented additions. With the tool
answering a large result and serve under an offloading policy, they differ only at the
offloaded result too (`agent.run` on both, which AnthropicModel streams).

    LLM_CONTEXT_BIN=target/debug/llm-context \\
        …/agents-venv/bin/python -m unittest tests/agents/test_pydantic_ai.py

scripts/test.sh installs pydantic-ai (pinned) in a venv outside the repository and runs this.
"""

import asyncio
import functools
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import recording as rec  # noqa: E402
from pydantic_ai import Agent, AgentRunResultEvent, Tool  # noqa: E402
from pydantic_ai.models.anthropic import AnthropicModel  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel  # noqa: E402
from pydantic_ai.providers.anthropic import AnthropicProvider  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402


def lookup_outage(ort: str, hinweis: str) -> str:
    """Looks up the state of an outage in a city.

    Args:
        ort: The city, e.g. Zürich.
        hinweis: A note for the log.
    """
    return rec.tool_result(ort, hinweis)


def lookup_outage_log(ort: str, hinweis: str) -> str:
    """Looks up the state of an outage in a city.

    Args:
        ort: The city, e.g. Zürich.
        hinweis: A note for the log.
    """
    return rec.large_tool_result(ort, hinweis)


TOOL = Tool(lookup_outage, name=rec.TOOL_NAME, description=rec.TOOL_DESCRIPTION)
LARGE_TOOL = Tool(lookup_outage_log, name=rec.TOOL_NAME, description=rec.TOOL_DESCRIPTION)


def model(wire, root):
    if wire in ("chat", "responses"):
        kind = OpenAIChatModel if wire == "chat" else OpenAIResponsesModel
        return kind(rec.OPENAI_MODEL, provider=OpenAIProvider(
            base_url=f"{root}/v1", api_key=rec.CLIENT_OPENAI_KEY))
    return AnthropicModel(rec.ANTHROPIC_MODEL, provider=AnthropicProvider(
        base_url=root, api_key=rec.CLIENT_ANTHROPIC_KEY))


def run(root, wire, streamed, tool=TOOL):
    agent = Agent(model(wire, root), instructions=rec.SYSTEM, tools=[tool])

    async def go():
        async with agent:  # closes the provider's HTTP client
            if not streamed:
                return (await agent.run(rec.PROMPT)).output
            # `run_stream` ends the run at the first text (here the one before the tool
            # call); `run_stream_events` streams every model request to the run's end.
            output = None
            async with agent.run_stream_events(rec.PROMPT) as events:
                async for event in events:
                    if isinstance(event, AgentRunResultEvent):
                        output = event.result.output
            return output
    return asyncio.run(go())


class PydanticAiThroughServe(rec.ToolLoop):
    CASES = {
        "openai_run": ("chat", functools.partial(run, wire="chat", streamed=False), False),
        "openai_events": ("chat", functools.partial(run, wire="chat", streamed=True), True),
        # AnthropicModel streams every request, `agent.run`'s too.
        "anthropic_run": ("messages", functools.partial(run, wire="messages", streamed=False),
                          True),
        "anthropic_events": ("messages", functools.partial(run, wire="messages", streamed=True),
                             True),
        "responses_run": ("responses",
                          functools.partial(run, wire="responses", streamed=False), False),
        "responses_events": ("responses",
                             functools.partial(run, wire="responses", streamed=True), True),
    }

    def test_openai_responses_model_run_completes(self):
        self.check_completed("responses_run")

    def test_openai_responses_model_run_bodies(self):
        self.check_bodies("responses_run")

    def test_openai_responses_model_run_stream_events_completes(self):
        self.check_completed("responses_events")

    def test_openai_responses_model_run_stream_events_bodies(self):
        self.check_bodies("responses_events")

    def test_openai_chat_model_run_completes(self):
        self.check_completed("openai_run")

    def test_openai_chat_model_run_bodies(self):
        self.check_bodies("openai_run")

    def test_openai_chat_model_run_stream_events_completes(self):
        self.check_completed("openai_events")

    def test_openai_chat_model_run_stream_events_bodies(self):
        self.check_bodies("openai_events")

    def test_anthropic_model_run_completes(self):
        self.check_completed("anthropic_run")

    def test_anthropic_model_run_bodies(self):
        self.check_bodies("anthropic_run")

    def test_anthropic_model_run_stream_events_completes(self):
        self.check_completed("anthropic_events")

    def test_anthropic_model_run_stream_events_bodies(self):
        self.check_bodies("anthropic_events")


class PydanticAiOffloadingThroughServe(rec.OffloadLoop):
    CASES = {
        "openai_run": ("chat", functools.partial(run, wire="chat", streamed=False,
                                                 tool=LARGE_TOOL), False),
        # Streamed: AnthropicModel streams every request.
        "anthropic_run": ("messages", functools.partial(run, wire="messages", streamed=False,
                                                        tool=LARGE_TOOL), True),
    }

    def test_openai_chat_model_run_completes(self):
        self.check_completed("openai_run")

    def test_openai_chat_model_run_differs_only_at_the_offloaded_result(self):
        self.check_offloaded("openai_run")

    def test_openai_chat_model_run_offload_reported(self):
        self.check_reported("openai_run")

    def test_anthropic_model_run_completes(self):
        self.check_completed("anthropic_run")

    def test_anthropic_model_run_differs_only_at_the_offloaded_result(self):
        self.check_offloaded("anthropic_run")

    def test_anthropic_model_run_offload_reported(self):
        self.check_reported("anthropic_run")


if __name__ == "__main__":
    unittest.main()
