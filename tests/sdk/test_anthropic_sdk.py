"""The official Anthropic Python SDK against `llm-context serve`, in front of a fake
Anthropic upstream on 127.0.0.1: what an agent written against Messages sees through the
proxy, including a 50-turn agent loop with large tool results.

Run by scripts/test.sh with the SDK installed in a venv outside the repository:
    LLM_CONTEXT_BIN=target/debug/llm-context python -m unittest tests/sdk/test_anthropic_sdk.py
"""

import http.server
import json
import os
import socket
import subprocess
import threading
import time
import unittest
import urllib.request

import anthropic

ANSWER = "Der Pool ist erschöpft (枯渇)."


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Upstream(http.server.BaseHTTPRequestHandler):
    """Anthropic's Messages API, faked: a tool_use while the last user block is text, then
    text; thinking (signed) first; streamed when asked. It records every body it gets."""

    protocol_version = "HTTP/1.1"
    bodies = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        Upstream.bodies.append(body)
        last = body["messages"][-1]["content"]
        last_kind = last if isinstance(last, str) else last[-1]["type"]
        calls_tool = body.get("tools") and last_kind != "tool_result"
        thinking = {"type": "thinking", "thinking": "Logs zuerst.", "signature": "sig-" + str(len(Upstream.bodies))}
        if calls_tool:
            content = [thinking, {"type": "tool_use", "id": f"toolu_{len(Upstream.bodies)}", "name": "fetch_logs",
                                  "input": {"unit": "api"}}]
            stop = "tool_use"
        else:
            content = [thinking, {"type": "text", "text": ANSWER}]
            stop = "end_turn"
        usage = {"input_tokens": 50, "output_tokens": 7}
        message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                   "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            out = json.dumps(message).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.event({"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                         "usage": {"input_tokens": 50, "output_tokens": 1}}})
        for i, block in enumerate(content):
            if block["type"] == "text":
                self.event({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
                for piece in ["Der Pool ", "ist erschöpft (枯渇)."]:
                    self.event({"type": "content_block_delta", "index": i,
                                "delta": {"type": "text_delta", "text": piece}})
            elif block["type"] == "thinking":
                self.event({"type": "content_block_start", "index": i,
                            "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
                self.event({"type": "content_block_delta", "index": i,
                            "delta": {"type": "thinking_delta", "thinking": block["thinking"]}})
                self.event({"type": "content_block_delta", "index": i,
                            "delta": {"type": "signature_delta", "signature": block["signature"]}})
            else:
                self.event({"type": "content_block_start", "index": i,
                            "content_block": {**block, "input": {}}})
                self.event({"type": "content_block_delta", "index": i,
                            "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
            self.event({"type": "content_block_stop", "index": i})
        self.event({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 7}})
        self.event({"type": "message_stop"})

    def event(self, data):
        self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def log_message(self, *args):
        pass


TOOLS = [{"name": "fetch_logs", "description": "Fetch a unit's logs",
          "input_schema": {"type": "object", "properties": {"unit": {"type": "string"}}}}]
ALLOWANCE = 7000


class AnthropicSdkThroughServe(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        cls.upstream = upstream
        port = free_port()
        policy = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"llm-context-asdk-{os.getpid()}.json")
        with open(policy, "w") as f:
            json.dump({"max_tokens": ALLOWANCE + 1000, "reserve_tokens": 1000}, f)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{upstream.server_address[1]}"
        env["ANTHROPIC_API_KEY"] = "sk-ant-upstream-only"
        cls.server = subprocess.Popen(
            [os.environ["LLM_CONTEXT_BIN"], "serve", "--listen", f"127.0.0.1:{port}", "--policy", policy],
            env=env, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        cls.client = anthropic.Anthropic(base_url=url, api_key="client-key", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(timeout=10)
        cls.upstream.shutdown()

    def test_a_message_and_the_report_headers(self):
        raw = self.client.messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=512, messages=[{"role": "user", "content": "Warum?"}])
        self.assertEqual(raw.headers["x-llm-context-memo"], "miss")
        self.assertGreater(int(raw.headers["x-llm-context-before-tokens"]), 0)
        reply = raw.parse()
        self.assertEqual(reply.content[-1].text, ANSWER)
        self.assertEqual(reply.content[0].type, "thinking")
        self.assertEqual(reply.usage.output_tokens, 7)
        self.assertNotIn("client-key", json.dumps(Upstream.bodies[-1]))

    def test_a_stream(self):
        with self.client.messages.stream(
                model="claude-sonnet-4-6", max_tokens=512,
                messages=[{"role": "user", "content": "Warum?"}]) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        self.assertEqual(text, ANSWER)
        self.assertEqual(final.content[0].type, "thinking")
        self.assertTrue(final.content[0].signature.startswith("sig-"))
        self.assertEqual(final.stop_reason, "end_turn")

    def test_a_streamed_tool_call(self):
        with self.client.messages.stream(
                model="claude-sonnet-4-6", max_tokens=512, tools=TOOLS,
                messages=[{"role": "user", "content": "Warum?"}]) as stream:
            final = stream.get_final_message()
        call = final.content[-1]
        self.assertEqual(call.type, "tool_use")
        self.assertEqual(call.input, {"unit": "api"})
        self.assertEqual(final.stop_reason, "tool_use")

    def test_a_request_that_cannot_fit_is_the_sdks_bad_request(self):
        before = len(Upstream.bodies)
        with self.assertRaises(anthropic.BadRequestError) as caught:
            self.client.messages.create(model="claude-sonnet-4-6", max_tokens=512,
                                        messages=[{"role": "user", "content": "слово " * 20000}])
        self.assertEqual(caught.exception.status_code, 400)
        self.assertEqual(caught.exception.body["error"]["type"], "invalid_request_error")
        self.assertEqual(len(Upstream.bodies), before, "nothing was sent")

    def test_a_50_turn_agent_loop_stays_in_the_window(self):
        """The agent keeps its whole transcript, as agents do; what the upstream gets stays
        within the allowance on every call, and thinking stays before its tool_use."""
        history = []
        after = []
        for turn in range(50):
            history.append({"role": "user", "content": f"Turn {turn}: warum fällt die API aus? なぜ?"})
            while True:
                raw = self.client.messages.with_raw_response.create(
                    model="claude-sonnet-4-6", max_tokens=512, tools=TOOLS, system="You are an SRE agent.",
                    messages=history)
                after.append(int(raw.headers["x-llm-context-after-tokens"]))
                reply = raw.parse()
                history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
                if reply.stop_reason != "tool_use":
                    break
                call = reply.content[-1]
                logs = "".join(
                    f'{{"ts":"2026-12-02T10:{i % 60:02d}:00Z","level":"error","msg":"connexion refusée #{i} 接続拒否"}}\n'
                    for i in range(200))
                history.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": logs}]})
            self.assertEqual(reply.content[-1].text, ANSWER)
        self.assertEqual(len(after), 100)
        self.assertGreater(len(json.dumps(history, ensure_ascii=False)), 50 * 200 * 60, "the agent's transcript grew")
        self.assertLessEqual(max(after), ALLOWANCE, "every upstream request fit the window")
        sent = Upstream.bodies[-1]
        self.assertLess(len(json.dumps(sent["messages"])), len(json.dumps(history)) // 10)
        for m in sent["messages"]:
            if m["role"] == "assistant" and isinstance(m["content"], list):
                kinds = [b["type"] for b in m["content"]]
                if "tool_use" in kinds and "thinking" in kinds:
                    self.assertLess(kinds.index("thinking"), kinds.index("tool_use"))
        self.assertNotIn("read_context_artifact", json.dumps(history))

    def test_an_unknown_key_is_the_sdks_authentication_error(self):
        """With a key table, a key the server does not know is 401 in the format's shape."""
        import hashlib
        config = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"llm-context-anthropic-keys-{os.getpid()}.toml")
        port = free_port()
        with open(config, "w") as f:
            f.write(f'listen = "127.0.0.1:{port}"\n[[keys]]\nsha256 = "{hashlib.sha256(b"sk-acme").hexdigest()}"\norg = "acme"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{self.upstream.server_address[1]}"
        env["ANTHROPIC_API_KEY"] = "sk-upstream-only"
        server = subprocess.Popen([os.environ["LLM_CONTEXT_BIN"], "serve", "--config", config],
                                  env=env, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    urllib.request.urlopen(url + "/healthz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.05)
            client = anthropic.Anthropic(base_url=url, api_key="sk-unknown", max_retries=0)
            with self.assertRaises(anthropic.AuthenticationError) as caught:
                client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "Warum?"}])
            self.assertEqual(caught.exception.body["error"]["type"], "authentication_error")
            good = anthropic.Anthropic(base_url=url, api_key="sk-acme", max_retries=0)
            reply = good.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "Warum?"}])
            self.assertEqual(reply.content[-1].text, ANSWER)
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    unittest.main()
