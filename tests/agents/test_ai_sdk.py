"""The Vercel AI SDK (npm `ai`, `@ai-sdk/openai`, `@ai-sdk/anthropic`): `generateText`
and `streamText` with one tool and `stopWhen: stepCountIs(3)`, on
`createOpenAI({baseURL}).chat(model)` (Chat Completions) and
`createAnthropic({baseURL})(model)` (Messages), each run by node (ai_sdk_loop.mjs) through
`llm-context serve` and directly, each in front of a recording fake upstream on 127.0.0.1
(recording.py), and the bodies the upstream got compared: equal but for the stack's
documented additions. With the tool answering a large result and serve under an
offloading policy, they differ only at the offloaded result too (`generateText` on
both).

    AI_SDK_DIR=…/ai-sdk LLM_CONTEXT_BIN=target/debug/llm-context \\
        python3 -m unittest tests/agents/test_ai_sdk.py

scripts/test.sh installs the packages (pinned) with npm outside the repository and runs
this.
"""

import functools
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import recording as rec  # noqa: E402


def run(root, provider, mode, large=False):
    spec = {"provider": provider, "mode": mode, "system": rec.SYSTEM, "prompt": rec.PROMPT,
            "toolName": rec.TOOL_NAME, "toolDescription": rec.TOOL_DESCRIPTION,
            "toolSchema": rec.TOOL_SCHEMA}
    if large:  # the model calls the tool with ARGS
        spec["toolResult"] = rec.large_tool_result(**rec.ARGS)
    if provider in ("openai", "openai-responses"):
        spec.update(baseURL=f"{root}/v1", apiKey=rec.CLIENT_OPENAI_KEY, model=rec.OPENAI_MODEL)
    else:
        spec.update(baseURL=f"{root}/v1", apiKey=rec.CLIENT_ANTHROPIC_KEY,
                    model=rec.ANTHROPIC_MODEL)
    out = subprocess.run(["node", os.path.join(HERE, "ai_sdk_loop.mjs"),
                          json.dumps(spec, ensure_ascii=False)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, AI_SDK_DIR=os.environ["AI_SDK_DIR"]))
    if out.returncode != 0:
        raise AssertionError(f"node exited {out.returncode}: {out.stderr[-3000:]}")
    result = json.loads(out.stdout)
    if result["steps"] != 2:
        raise AssertionError(f"{result['steps']} steps, not the two of a tool loop: {result}")
    return result["text"]


class AiSdkThroughServe(rec.ToolLoop):
    CASES = {
        "openai_generate": ("chat", functools.partial(run, provider="openai", mode="generate"),
                            False),
        "openai_stream": ("chat", functools.partial(run, provider="openai", mode="stream"), True),
        "anthropic_generate": ("messages", functools.partial(run, provider="anthropic",
                                                             mode="generate"), False),
        "anthropic_stream": ("messages", functools.partial(run, provider="anthropic",
                                                           mode="stream"), True),
        "responses_generate": ("responses", functools.partial(run, provider="openai-responses",
                                                              mode="generate"), False),
        "responses_stream": ("responses", functools.partial(run, provider="openai-responses",
                                                            mode="stream"), True),
    }

    def test_openai_responses_generate_text_completes(self):
        self.check_completed("responses_generate")

    def test_openai_responses_generate_text_bodies(self):
        self.check_bodies("responses_generate")

    def test_openai_responses_stream_text_completes(self):
        self.check_completed("responses_stream")

    def test_openai_responses_stream_text_bodies(self):
        self.check_bodies("responses_stream")

    def test_openai_chat_generate_text_completes(self):
        self.check_completed("openai_generate")

    def test_openai_chat_generate_text_bodies(self):
        self.check_bodies("openai_generate")

    def test_openai_chat_stream_text_completes(self):
        self.check_completed("openai_stream")

    def test_openai_chat_stream_text_bodies(self):
        self.check_bodies("openai_stream")

    def test_anthropic_generate_text_completes(self):
        self.check_completed("anthropic_generate")

    def test_anthropic_generate_text_bodies(self):
        self.check_bodies("anthropic_generate")

    def test_anthropic_stream_text_completes(self):
        self.check_completed("anthropic_stream")

    def test_anthropic_stream_text_bodies(self):
        self.check_bodies("anthropic_stream")


def large(provider, mode):
    return functools.partial(run, provider=provider, mode=mode, large=True)


class AiSdkOffloadingThroughServe(rec.OffloadLoop):
    CASES = {
        "openai_generate": ("chat", large("openai", "generate"), False),
        "anthropic_generate": ("messages", large("anthropic", "generate"), False),
    }

    def test_openai_chat_generate_text_completes(self):
        self.check_completed("openai_generate")

    def test_openai_chat_generate_text_differs_only_at_the_offloaded_result(self):
        self.check_offloaded("openai_generate")

    def test_openai_chat_generate_text_offload_reported(self):
        self.check_reported("openai_generate")

    def test_anthropic_generate_text_completes(self):
        self.check_completed("anthropic_generate")

    def test_anthropic_generate_text_differs_only_at_the_offloaded_result(self):
        self.check_offloaded("anthropic_generate")

    def test_anthropic_generate_text_offload_reported(self):
        self.check_reported("anthropic_generate")


if __name__ == "__main__":
    unittest.main()
