"""Claude Code itself, run non-interactively through `llm-context serve` and directly,
each in front of a recording fake Anthropic on 127.0.0.1, and the two recordings compared.

The fake answers Claude Code's main loop with a signed thinking block, a text and a Bash
`tool_use`, then, once the tool's result comes back, with a text: a two-round tool loop,
streamed (Claude Code always streams). Through the proxy the loop must complete, each turn
must stay its own message (they were merged when every answer carried one id), and every
body the upstream gets must equal the direct run's but for the stack's documented
additions (the read tool; on this model, which binds thinking, the provider's clearing
edit after Claude Code's own) and what differs between two runs of Claude Code anyway
(its session id).

    CLAUDE_CODE_BIN=…/claude LLM_CONTEXT_BIN=target/debug/llm-context \\
        python3 -m unittest tests/agents/test_claude_code.py

scripts/test.sh installs Claude Code (pinned) outside the repository and runs this.
"""

import http.server
import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

MARKER = "llm-context-probe-接続"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recording:
    """A fake Anthropic on 127.0.0.1 that records every request it gets; the Bash call it
    makes runs `command`."""

    def __init__(self, command=f"echo {MARKER}"):
        self.requests = []
        ids = itertools.count(1)
        recording = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _read(self):
                n = int(self.headers.get("content-length") or 0)
                return self.rfile.read(n) if n else b""

            def _send(self, status, content_type, body):
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._read()
                recording.requests.append({"method": "GET", "path": self.path})
                self._send(200, "application/json", b'{"data": [], "has_more": false}')

            def do_POST(self):
                raw = self._read()
                body = json.loads(raw)
                recording.requests.append({"method": "POST", "path": self.path,
                                           "headers": dict(self.headers), "body": body})
                if "count_tokens" in self.path:
                    self._send(200, "application/json", b'{"input_tokens": 1234}')
                    return
                n = next(ids)
                last = (body.get("messages") or [{}])[-1].get("content")
                answered = isinstance(last, list) and any(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in last)
                tools = [t.get("name") for t in body.get("tools") or []]
                if "Bash" in tools and not answered:
                    blocks = [
                        {"type": "thinking", "thinking": "Erst die Probe ausführen.",
                         "signature": f"sig-{n:04d}-EqQBCgIYAhIM"},
                        {"type": "text", "text": "Ich prüfe das."},
                        {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash",
                         "input": {"command": command,
                                   "description": "print the probe's marker"}},
                    ]
                    stop = "tool_use"
                else:
                    blocks = [{"type": "text", "text": f"Fertig: {MARKER}."}]
                    stop = "end_turn"
                self._send(200, "text/event-stream", stream(f"msg_{n:04d}", body, blocks, stop))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()

    def messages_calls(self):
        return [r for r in self.requests
                if r["method"] == "POST" and r["path"].startswith("/v1/messages")
                and "count_tokens" not in r["path"]]


def stream(message_id, body, blocks, stop):
    """The Messages stream answering `body` with `blocks`."""
    events = [("message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": body.get("model"),
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 1}}})]
    for i, b in enumerate(blocks):
        if b["type"] == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": b["thinking"]},
                      {"type": "signature_delta", "signature": b["signature"]}]
        elif b["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": b["text"]}]
        else:
            start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(b["input"])}]
        events.append(("content_block_start",
                       {"type": "content_block_start", "index": i, "content_block": start}))
        for d in deltas:
            events.append(("content_block_delta",
                           {"type": "content_block_delta", "index": i, "delta": d}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 12}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {k}\ndata: {json.dumps(v)}\n\n" for k, v in events).encode()


def claude_code(base_url, home, workdir):
    """Claude Code's `-p` run against `base_url`: its JSON result."""
    env = dict(os.environ, HOME=home, ANTHROPIC_BASE_URL=base_url,
               ANTHROPIC_API_KEY="sk-ant-client", IS_SANDBOX="1", DISABLE_TELEMETRY="1",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1")
    out = subprocess.run(
        [os.environ["CLAUDE_CODE_BIN"], "-p", "Run the probe.",
         "--dangerously-skip-permissions", "--output-format", "json"],
        cwd=workdir, env=env, capture_output=True, timeout=180, text=True)
    if out.returncode != 0:
        raise AssertionError(f"claude exited {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def normalized(body):
    """`body` without what differs between two runs of Claude Code (its session id)."""
    body = json.loads(json.dumps(body))
    if "metadata" in body:
        body["metadata"].pop("user_id", None)
    return body


def wait_for(url):
    """Waits until `url` answers, for at most 10 s."""
    for _ in range(200):
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer")


def start_serve(upstream_url):
    """`llm-context serve` in front of the Anthropic upstream at `upstream_url`, started:
    the process and its URL."""
    port = free_port()
    env = dict(os.environ, ANTHROPIC_BASE_URL=upstream_url,
               ANTHROPIC_API_KEY="sk-ant-server", OPENAI_API_KEY="sk-unused",
               RUST_LOG="error")
    serve = subprocess.Popen(
        [os.environ.get("LLM_CONTEXT_BIN", "target/debug/llm-context"), "serve",
         "--listen", f"127.0.0.1:{port}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{url}/healthz")
    return serve, url


class ClaudeCodeThroughServe(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.direct = Recording()
        self.through = Recording()
        self.serve, self.url = start_serve(self.through.url)

    def tearDown(self):
        self.serve.terminate()
        self.serve.wait(timeout=30)
        self.direct.close()
        self.through.close()
        self.tmp.cleanup()

    def run_in(self, url):
        # The same fresh home and working directory for each run: Claude Code's prompt
        # names both, and what a run leaves in them would change the next one's.
        home = os.path.join(self.tmp.name, "home")
        work = os.path.join(self.tmp.name, "work")
        for d in (home, work):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        return claude_code(url, home, work)

    def test_the_tool_loop_completes_and_the_upstream_gets_what_claude_code_sent(self):
        direct = self.run_in(self.direct.url)
        through = self.run_in(self.url)
        for result in (direct, through):
            self.assertFalse(result["is_error"], result)
            self.assertEqual(result["result"], f"Fertig: {MARKER}.")
            self.assertEqual(result["num_turns"], 2)
        sent_direct = self.direct.messages_calls()
        sent_through = self.through.messages_calls()
        self.assertEqual(len(sent_direct), 2)
        self.assertEqual(len(sent_through), 2)
        for a, b in zip(sent_direct, sent_through):
            self.assertEqual(a["path"], b["path"])  # `?beta=true` kept
            self.assertEqual(a["headers"].get("anthropic-beta"),
                             b["headers"].get("anthropic-beta"))
            self.assertEqual(b["headers"].get("x-api-key"), "sk-ant-server")
            direct_body, through_body = normalized(a["body"]), normalized(b["body"])
            # The stack's documented additions: its read tool, after the client's; and,
            # since the model binds thinking (executor auto: the provider clears), the
            # policy's clearing edit after Claude Code's own edits, which stay first and
            # as Claude Code wrote them (its beta is Claude Code's own already).
            added = through_body["tools"].pop()
            self.assertEqual(added["name"], "read_context_artifact")
            edits = through_body["context_management"]["edits"]
            ours = edits.pop()
            self.assertEqual(ours["type"], "clear_tool_uses_20250919")
            self.assertEqual(ours["trigger"]["type"], "input_tokens")
            if not edits and "context_management" not in direct_body:
                del through_body["context_management"]
            self.assertIn("context-management-2025-06-27",
                          b["headers"].get("anthropic-beta", ""))
            self.assertEqual(direct_body, through_body)
        # The second round: the first answer came back as one assistant message of its
        # own, thinking and signature unchanged, before the tool's result.
        second = sent_through[1]["body"]["messages"]
        assistant = [m for m in second if m["role"] == "assistant"]
        self.assertEqual(len(assistant), 1)
        thinking = assistant[0]["content"][0]
        self.assertEqual(thinking["type"], "thinking")
        self.assertEqual(thinking["signature"], "sig-0001-EqQBCgIYAhIM")
        self.assertIn(MARKER, json.dumps(second[-1], ensure_ascii=False))
        # The ledger holds the session under Claude Code's own session id, its two calls
        # billed by the usage the fake reported, and the page shows it.
        session = sent_through[0]["headers"]["x-claude-code-session-id"]
        with urllib.request.urlopen(
                f"{self.url}/llm-context/ledger/sessions/{session}", timeout=10) as r:
            ledger = json.loads(r.read())
        self.assertEqual(ledger["totals"]["requests"], 2)
        self.assertEqual([q["actual"]["uncached"] for q in ledger["requests"]], [50, 50])
        with urllib.request.urlopen(f"{self.url}/ui", timeout=10) as r:
            self.assertIn(f'data-session="{session}"', r.read().decode())
        print(f"\nledger: Claude Code session: actual ${ledger['totals']['actual_usd']:.6f}, "
              f"pass-through ${ledger['totals']['passthrough_usd']:.6f} "
              f"({ledger['totals']['provenance']})")


class ClaudeCodeOffloaded(unittest.TestCase):
    """Claude Code through `serve` whose Bash call prints ~24 KB, over the default
    policy's 6,000 characters: the stack offloads the result, Claude Code's loop still
    completes, and the ledger's page shows the session's actual cost beside its modelled
    pass-through cost (printed: the figures the closing note quotes)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.upstream = Recording(command=f"seq 1 5000; echo {MARKER}")
        self.serve, self.url = start_serve(self.upstream.url)

    def tearDown(self):
        self.serve.terminate()
        self.serve.wait(timeout=30)
        self.upstream.close()
        self.tmp.cleanup()

    def test_a_long_result_is_offloaded_and_the_page_shows_what_it_saved(self):
        home = os.path.join(self.tmp.name, "home")
        work = os.path.join(self.tmp.name, "work")
        for d in (home, work):
            os.makedirs(d)
        result = claude_code(self.url, home, work)
        self.assertFalse(result["is_error"], result)
        self.assertEqual(result["result"], f"Fertig: {MARKER}.")
        calls = self.upstream.messages_calls()
        self.assertEqual(len(calls), 2)
        sent = json.dumps(calls[1]["body"]["messages"][-1], ensure_ascii=False)
        self.assertIn("context_artifact", sent)
        self.assertNotIn("\n4999\n", sent)
        session = calls[0]["headers"]["x-claude-code-session-id"]
        with urllib.request.urlopen(
                f"{self.url}/llm-context/ledger/sessions/{session}", timeout=10) as r:
            ledger = json.loads(r.read())
        rows = ledger["requests"]
        self.assertEqual([q["edits"]["offloaded"] for q in rows], [0, 1])
        self.assertGreater(rows[1]["client_tokens"], rows[1]["sent_tokens"])
        with urllib.request.urlopen(f"{self.url}/ui/sessions/{session}", timeout=10) as r:
            page = r.read().decode()
        shown = {}
        for name in ("actual", "passthrough", "saving"):
            at = page.index(f'<dd id="{name}"')
            shown[name] = page[page.index(">", at) + 1:page.index("</dd>", at)]
        self.assertEqual(float(shown["actual"].lstrip("$")),
                         round(ledger["totals"]["actual_usd"], 6))
        print(f"\nledger page, offloading Claude Code session: actual {shown['actual']}, "
              f"pass-through {shown['passthrough']}, saving {shown['saving']} "
              f"({ledger['totals']['provenance']})")


class ClaudeCodeAgainstTheEnforcingUpstream(unittest.TestCase):
    """Claude Code through `serve` in front of the enforcing fake
    (`examples/enforcing_upstream.rs`), which signs each thinking block over what came
    before it and refuses a request whose history changed before one, as the provider's
    binding models do, and checks `context_management` (edit order, each edit's beta,
    `clear_thinking` only with thinking on). Claude Code's own edits and the stack's
    clearing edit must arrive merged, Claude Code's first, and no request be refused."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        up_port = free_port()
        self.upstream = subprocess.Popen(
            [os.environ.get("ENFORCING_UPSTREAM_BIN", "target/debug/examples/enforcing_upstream"),
             f"127.0.0.1:{up_port}", "--rounds", "3"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.upstream_url = f"http://127.0.0.1:{up_port}"
        wait_for(f"{self.upstream_url}/seen")
        self.serve, self.url = start_serve(self.upstream_url)

    def tearDown(self):
        for p in (self.serve, self.upstream):
            p.terminate()
            p.wait(timeout=30)
        self.tmp.cleanup()

    def test_a_thinking_tool_loop_is_never_refused_and_its_edits_arrive_merged(self):
        home = os.path.join(self.tmp.name, "home")
        work = os.path.join(self.tmp.name, "work")
        for d in (home, work):
            os.makedirs(d)
        result = claude_code(self.url, home, work)
        self.assertFalse(result["is_error"], result)
        self.assertEqual(result["result"], "Fertig. 完了。")
        # Three Bash rounds, each answered with a signed thinking block Claude Code sent
        # back, then the answer.
        self.assertEqual(result["num_turns"], 4)
        with urllib.request.urlopen(f"{self.upstream_url}/seen", timeout=5) as r:
            seen = json.loads(r.read())
        self.assertEqual(seen["refusals"], [])
        self.assertEqual(seen["requests"], 4)
        for cm in seen["context_management"]:
            types = [e["type"] for e in cm["edits"]]
            # Claude Code's own edits first, as it wrote them; the stack's clearing last.
            self.assertEqual(types[-1], "clear_tool_uses_20250919")
            self.assertEqual(types.count("clear_tool_uses_20250919"), 1, types)


if __name__ == "__main__":
    unittest.main()
