"""The official OpenAI Python SDK against `llm-context serve`, in front of a fake upstream
on 127.0.0.1: what an agent written in Python sees through the proxy.

Run by scripts/test.sh with the SDK installed in a venv outside the repository:
    LLM_CONTEXT_BIN=target/debug/llm-context python -m unittest tests/sdk/test_openai_sdk.py
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

import openai


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Upstream(http.server.BaseHTTPRequestHandler):
    """A provider that answers a tool call while the last message is the user's, then text;
    streamed when asked. It records every body it gets."""

    protocol_version = "HTTP/1.1"
    bodies = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        Upstream.bodies.append(body)
        last = body["messages"][-1]
        calls_tool = last["role"] == "user" and body.get("tools")
        base = {"id": "chatcmpl-1", "created": 1, "model": body["model"]}
        usage = {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57}
        if not body.get("stream"):
            if calls_tool:
                message = {"role": "assistant", "content": None, "refusal": None,
                           "tool_calls": [{"id": "call_1", "type": "function",
                                           "function": {"name": "fetch_logs", "arguments": "{\"unit\": \"api\"}"}}]}
                finish = "tool_calls"
            else:
                message = {"role": "assistant", "content": "Die Datenbank verweigert (接続拒否).", "refusal": None}
                finish = "stop"
            out = json.dumps({**base, "object": "chat.completion", "usage": usage,
                              "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]}).encode()
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
        chunk = {**base, "object": "chat.completion.chunk"}
        for piece in ["Die Datenbank ", "verweigert ", "(接続拒否)."]:
            self.event({**chunk, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        self.event({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self.event({**chunk, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def event(self, data):
        self.wfile.write(("data: " + json.dumps(data) + "\n\n").encode())
        self.wfile.flush()

    def log_message(self, *args):
        pass


class OpenAiSdkThroughServe(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        cls.upstream = upstream
        port = free_port()
        policy = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"llm-context-sdk-{os.getpid()}.json")
        with open(policy, "w") as f:
            json.dump({"max_tokens": 8000, "reserve_tokens": 1000}, f)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
        env["OPENAI_API_KEY"] = "sk-upstream-only"
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
        cls.client = openai.OpenAI(base_url=url + "/v1", api_key="client-key", max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(timeout=10)
        cls.upstream.shutdown()

    def test_a_completion_and_the_report_headers(self):
        raw = self.client.chat.completions.with_raw_response.create(
            model="gpt-5.4", messages=[{"role": "user", "content": "Warum?"}])
        self.assertEqual(raw.headers["x-llm-context-memo"], "miss")
        self.assertGreater(int(raw.headers["x-llm-context-before-tokens"]), 0)
        reply = raw.parse()
        self.assertEqual(reply.choices[0].message.content, "Die Datenbank verweigert (接続拒否).")
        self.assertEqual(reply.usage.completion_tokens, 7)
        # The upstream got the server's key, never the client's.
        self.assertNotIn("client-key", json.dumps(Upstream.bodies[-1]))

    def test_a_stream(self):
        stream = self.client.chat.completions.create(
            model="gpt-5.4", messages=[{"role": "user", "content": "Warum?"}],
            stream=True, stream_options={"include_usage": True})
        text, usage = "", None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            if chunk.usage:
                usage = chunk.usage
        self.assertEqual(text, "Die Datenbank verweigert (接続拒否).")
        self.assertEqual(usage.completion_tokens, 7)

    def test_a_tool_loop_whose_transcript_outgrows_the_window(self):
        tools = [{"type": "function", "function": {"name": "fetch_logs", "parameters": {
            "type": "object", "properties": {"unit": {"type": "string"}}}}}]
        history = [{"role": "system", "content": "You are an SRE agent."}]
        for turn in range(12):
            history.append({"role": "user", "content": f"Turn {turn}: why does the api fail?"})
            reply = self.client.chat.completions.create(model="gpt-5.4", messages=history, tools=tools)
            call = reply.choices[0].message.tool_calls[0]
            history.append(reply.choices[0].message.model_dump(exclude_none=True))
            logs = "".join(f'{{"level":"error","msg":"connexion refusée #{i} 接続拒否"}}\n' for i in range(300))
            history.append({"role": "tool", "tool_call_id": call.id, "content": logs})
            reply = self.client.chat.completions.create(model="gpt-5.4", messages=history, tools=tools)
            history.append({"role": "assistant", "content": reply.choices[0].message.content})
        sent = Upstream.bodies[-1]
        # The agent keeps everything; the upstream got what fits the 7,000-token allowance.
        self.assertGreater(len(json.dumps(history)), 4 * 7000 * 4)
        self.assertLess(len(json.dumps(sent["messages"])), len(json.dumps(history)) // 3)
        self.assertNotIn("read_context_artifact", json.dumps(reply.model_dump()))

    def test_a_request_that_cannot_fit_is_the_sdks_bad_request(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.chat.completions.create(
                model="gpt-5.4", messages=[{"role": "user", "content": "слово " * 20000}])
        self.assertEqual(caught.exception.code, "context_length_exceeded")
        self.assertEqual(caught.exception.body["code"], "context_length_exceeded")

    def test_an_unknown_key_is_the_sdks_authentication_error(self):
        """With a key table, a key the server does not know is 401 in the format's shape."""
        import hashlib
        config = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"llm-context-openai-keys-{os.getpid()}.toml")
        port = free_port()
        with open(config, "w") as f:
            f.write(f'listen = "127.0.0.1:{port}"\n[[keys]]\nsha256 = "{hashlib.sha256(b"sk-acme").hexdigest()}"\norg = "acme"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{self.upstream.server_address[1]}/v1"
        env["OPENAI_API_KEY"] = "sk-upstream-only"
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
            client = openai.OpenAI(base_url=url + "/v1", api_key="sk-unknown", max_retries=0)
            with self.assertRaises(openai.AuthenticationError) as caught:
                client.chat.completions.create(model="gpt-5.4", messages=[{"role": "user", "content": "Warum?"}])
            self.assertEqual(caught.exception.code, "invalid_api_key")
            good = openai.OpenAI(base_url=url + "/v1", api_key="sk-acme", max_retries=0)
            reply = good.chat.completions.create(model="gpt-5.4", messages=[{"role": "user", "content": "Warum?"}])
            self.assertTrue(reply.choices[0].message.content)
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    unittest.main()
