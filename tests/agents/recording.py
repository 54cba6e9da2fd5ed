"""What the agent-framework tests share (test_openai_agents.py, test_ai_sdk.py,
test_langchain.py, test_pydantic_ai.py): a recording fake upstream on 127.0.0.1 speaking
OpenAI Chat Completions, the Responses API and Anthropic Messages, JSON and SSE; `llm-context serve`
started in front of one; and the comparison of what a direct run and a run through the
proxy sent upstream, after removing only the stack's documented additions (ToolLoop) and,
with serve under an offloading policy and a tool answering a large result, the offloaded
result's preview (OffloadLoop).

The fake is one model's two-round tool loop: while the last message is the user's and
tools are offered it calls the first tool the client offered with ARGS; once a tool's
result is there it answers FINAL (never a read of an offloaded result: that is another
test). Every answer has an id of its own (`chatcmpl-…`,
`call_…`, `msg_…`, `toolu_…`, counted from 1 after each `reset`, so a direct run and a
run through the proxy see the same ids).
"""

import copy
import http.server
import itertools
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

OPENAI_MODEL = "gpt-5.4"
# claude-sonnet-4-5 is in the catalog too, but retired (2026-11-30): pydantic-ai warns.
ANTHROPIC_MODEL = "claude-sonnet-4-6"
READ_TOOL = "read_context_artifact"

CLIENT_OPENAI_KEY = "sk-client-openai"
CLIENT_ANTHROPIC_KEY = "sk-ant-client"
SERVER_OPENAI_KEY = "sk-server-openai"
SERVER_ANTHROPIC_KEY = "sk-ant-server"

PROMPT = "Ist die Störung in Zürich behoben? Prüfe es mit dem Werkzeug."
# The system prompt and the tool's description are long enough (over the 2,048 tokens
# the catalog says claude-sonnet-4-6 caches from) for the stack to place its breakpoints
# on a client's Messages body.
SYSTEM = "Du bist ein Betriebsassistent. Antworte knapp.\n\n" + "\n".join(
    f"Regel {i}: Prüfe Störungen (障害) in Zürich, Genève und Łódź zuerst im Betriebsbuch, "
    f"dann mit dem Werkzeug; melde jede Abweichung über Stufe {i % 4} sofort." for i in range(60))
TOOL_NAME = "lookup_outage"
TOOL_DESCRIPTION = "Looks up the state of an outage in a city.\n\n" + "\n".join(
    f"Case {i}: for an outage of class {i % 7} in a city such as Zürich or São Paulo, pass the "
    f"city as `ort` and a short note (any language, e.g. 接続拒否) as `hinweis`." for i in range(50))
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"ort": {"type": "string", "description": "The city, e.g. Zürich."},
                   "hinweis": {"type": "string", "description": "A note for the log."}},
    "required": ["ort", "hinweis"],
    "additionalProperties": False,
}
# What the model passes the tool (non-ASCII on purpose; its properties not in alphabetical
# order, which a proxy re-sorting JSON objects would change), what the tool answers, and
# the model's last word: the loop completed when a client ends with FINAL.
ARGS = {"ort": "Zürich", "hinweis": "接続拒否 — bitte prüfen ✓"}
FINAL = "Fertig: Zürich ist wieder erreichbar (接続 OK) ✓."


def tool_result(ort, hinweis):
    """The one tool every client declares, run by the client."""
    return f"Störung in {ort} behoben; Notiz «{hinweis}» gespeichert."


def large_tool_result(ort, hinweis):
    """The same tool when it answers with its log: about 40 KB of JSON lines (quotes,
    backslashes, non-ASCII, one line each), over OFFLOAD_POLICY's threshold."""
    levels = ("INFO", "WARN", "ERROR")
    lines = [_dumps({
        "ts": f"2026-03-14T08:{i // 60:02d}:{i % 60:02d}.{(i * 37) % 1000:03d}Z",
        "level": levels[i % 3], "ort": ort, "dienst": f"edge-{ort.lower()}-{i % 4}",
        "msg": f'Verbindung zu "db-łódź-{i % 5}" abgelehnt (接続拒否), Versuch {i}; '
               f'Pfad C:\\störungen\\{i % 7}.log',
        "hinweis": hinweis, "latenz_ms": 12 + (i * 7919) % 900,
        "pfad": f"/api/störungen?stadt={ort}&seite={i}"}) for i in range(140)]
    return f"Störung in {ort}: Protokoll der letzten Stunde ({len(lines)} Zeilen)\n" \
        + "\n".join(lines) + "\n"


# Under this policy (`llm-context serve --policy`) a result over 2,000 characters, such as
# large_tool_result's, is offloaded: the upstream gets a preview naming its artifact.
OFFLOAD_POLICY = {"tool_result_max_chars": 2000}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dumps(value):
    # As the providers send it: UTF-8, not \u escapes.
    return json.dumps(value, ensure_ascii=False)


def _pieces(text, n=3):
    """`text` cut in `n` pieces (through multi-byte characters too)."""
    step = max(1, -(-len(text) // n))
    return [text[i:i + step] for i in range(0, len(text), step)]


class Recording:
    """A fake OpenAI + Anthropic on 127.0.0.1 that records every request it gets:
    `/v1/chat/completions` and `/v1/messages`, `stream` true or false."""

    def __init__(self):
        self.requests = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        recording = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, content_type, body):
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

            def do_GET(self):
                recording.requests.append({"method": "GET", "path": self.path,
                                           "headers": dict(self.headers)})
                self._send(404, "application/json", b'{"error": {"message": "not found"}}')

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw)
                with recording._lock:
                    recording.requests.append({"method": "POST", "path": self.path,
                                               "headers": {k.lower(): v for k, v in self.headers.items()},
                                               "raw": raw, "body": body})
                    n = next(recording._ids)
                path = self.path.split("?")[0]
                if path.endswith("/chat/completions"):
                    self._chat(n, body)
                elif path.endswith("/responses"):
                    self._responses(n, body)
                elif path.endswith("/messages"):
                    self._messages(n, body)
                else:
                    self._send(404, "application/json", b'{"error": {"message": "not found"}}')

            def _chat(self, n, body):
                tools = [t["function"]["name"] for t in body.get("tools") or []
                         if t.get("type") == "function" and t["function"]["name"] != READ_TOOL]
                last = body["messages"][-1]
                calls = bool(tools) and last["role"] == "user"
                base = {"id": f"chatcmpl-{n:04d}", "created": 1760000000 + n,
                        "model": body["model"], "system_fingerprint": "fp_recording"}
                usage = {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129}
                call = {"id": f"call_{n:04d}", "type": "function",
                        "function": {"name": tools[0] if calls else "", "arguments": _dumps(ARGS)}}
                if not body.get("stream"):
                    if calls:
                        message = {"role": "assistant", "content": None, "refusal": None,
                                   "tool_calls": [call]}
                    else:
                        message = {"role": "assistant", "content": FINAL, "refusal": None}
                    out = {**base, "object": "chat.completion", "choices": [{
                        "index": 0, "message": message, "logprobs": None,
                        "finish_reason": "tool_calls" if calls else "stop"}], "usage": usage}
                    self._send(200, "application/json", _dumps(out).encode())
                    return
                with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                chunk = {**base, "object": "chat.completion.chunk"}

                def event(delta, finish=None):
                    c = {**chunk, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                               "finish_reason": finish}]}
                    if with_usage:
                        c["usage"] = None
                    return c

                if calls:
                    events = [event({"role": "assistant", "content": None, "tool_calls": [{
                        "index": 0, "id": call["id"], "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""}}]})]
                    events += [event({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
                               for p in _pieces(call["function"]["arguments"])]
                    events.append(event({}, "tool_calls"))
                else:
                    events = [event({"role": "assistant", "content": "", "refusal": None})]
                    events += [event({"content": p}) for p in _pieces(FINAL)]
                    events.append(event({}, "stop"))
                if with_usage:
                    events.append({**chunk, "choices": [], "usage": usage})
                out = "".join(f"data: {_dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, "text/event-stream", out.encode())

            def _responses(self, n, body):
                tools = [t["name"] for t in body.get("tools") or []
                         if t.get("type") == "function" and t.get("name") != READ_TOOL]
                items = body["input"] if isinstance(body["input"], list) else [
                    {"role": "user", "content": body["input"]}]
                last = items[-1]
                calls = bool(tools) and last.get("role") == "user"
                if calls:
                    output = [{"type": "function_call", "id": f"fc_{n:04d}",
                               "call_id": f"call_{n:04d}", "name": tools[0],
                               "arguments": _dumps(ARGS), "status": "completed"}]
                else:
                    output = [{"type": "message", "id": f"msg_{n:04d}", "role": "assistant",
                               "status": "completed",
                               "content": [{"type": "output_text", "text": FINAL,
                                            "annotations": [], "logprobs": []}]}]
                whole = {"id": f"resp_{n:04d}", "object": "response",
                         "created_at": 1760000000 + n, "status": "completed", "error": None,
                         "incomplete_details": None, "instructions": body.get("instructions"),
                         "model": body["model"], "output": output,
                         "parallel_tool_calls": True, "metadata": {}, "tool_choice": "auto",
                         "tools": body.get("tools") or [], "temperature": None, "top_p": None,
                         "usage": {"input_tokens": 120,
                                   "input_tokens_details": {"cached_tokens": 0},
                                   "output_tokens": 9,
                                   "output_tokens_details": {"reasoning_tokens": 0},
                                   "total_tokens": 129}}
                if not body.get("stream"):
                    self._send(200, "application/json", _dumps(whole).encode())
                    return
                events = [{"type": "response.created",
                           "response": {**whole, "status": "in_progress", "output": []}}]
                for i, item in enumerate(output):
                    empty = dict(item, content=[]) if item["type"] == "message" else \
                        dict(item, arguments="")
                    events.append({"type": "response.output_item.added", "output_index": i,
                                   "item": empty})
                    if item["type"] == "message":
                        events += [{"type": "response.output_text.delta", "output_index": i,
                                    "item_id": item["id"], "content_index": 0, "delta": p,
                                    "logprobs": []} for p in _pieces(FINAL)]
                    else:
                        events += [{"type": "response.function_call_arguments.delta",
                                    "output_index": i, "item_id": item["id"], "delta": p}
                                   for p in _pieces(item["arguments"])]
                    events.append({"type": "response.output_item.done", "output_index": i,
                                   "item": item})
                events.append({"type": "response.completed", "response": whole})
                for k, e in enumerate(events):
                    e["sequence_number"] = k
                out = "".join(f"event: {e['type']}\ndata: {_dumps(e)}\n\n" for e in events)
                self._send(200, "text/event-stream", out.encode())

            def _messages(self, n, body):
                tools = [t["name"] for t in body.get("tools") or []
                         if t.get("name") != READ_TOOL and "input_schema" in t]
                last = body["messages"][-1]
                content = last["content"]
                answered = isinstance(content, list) and any(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
                calls = bool(tools) and last["role"] == "user" and not answered
                if calls:
                    blocks = [{"type": "text", "text": "Ich sehe nach."},
                              {"type": "tool_use", "id": f"toolu_{n:04d}", "name": tools[0],
                               "input": ARGS}]
                    stop = "tool_use"
                else:
                    blocks = [{"type": "text", "text": FINAL}]
                    stop = "end_turn"
                message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant",
                           "model": body["model"], "content": blocks, "stop_reason": stop,
                           "stop_sequence": None,
                           "usage": {"input_tokens": 120, "output_tokens": 9,
                                     "cache_creation_input_tokens": 0,
                                     "cache_read_input_tokens": 0}}
                if not body.get("stream"):
                    self._send(200, "application/json", _dumps(message).encode())
                    return
                events = [("message_start", {"type": "message_start", "message": {
                    **message, "content": [], "stop_reason": None,
                    "usage": {**message["usage"], "output_tokens": 1}}}),
                    ("ping", {"type": "ping"})]
                for i, b in enumerate(blocks):
                    if b["type"] == "text":
                        start = {"type": "text", "text": ""}
                        deltas = [{"type": "text_delta", "text": p} for p in _pieces(b["text"])]
                    else:
                        start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                        deltas = [{"type": "input_json_delta", "partial_json": p}
                                  for p in _pieces(_dumps(b["input"]))]
                    events.append(("content_block_start", {"type": "content_block_start",
                                                           "index": i, "content_block": start}))
                    events += [("content_block_delta", {"type": "content_block_delta",
                                                        "index": i, "delta": d}) for d in deltas]
                    events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
                events.append(("message_delta", {"type": "message_delta",
                                                 "delta": {"stop_reason": stop, "stop_sequence": None},
                                                 "usage": {"output_tokens": 9}}))
                events.append(("message_stop", {"type": "message_stop"}))
                out = "".join(f"event: {k}\ndata: {_dumps(v)}\n\n" for k, v in events)
                self._send(200, "text/event-stream", out.encode())

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self):
        with self._lock:
            self.requests = []
            self._ids = itertools.count(1)

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def calls(self, wire):
        """The model calls of `wire` ("chat" or "messages") recorded since the last reset."""
        suffix = {"chat": "/chat/completions", "responses": "/responses"}.get(wire, "/messages")
        return [r for r in self.requests
                if r["method"] == "POST" and r["path"].split("?")[0].endswith(suffix)]


class Serve:
    """`llm-context serve` (LLM_CONTEXT_BIN) in front of `upstream`, with the server's keys,
    and with `policy` (a ContextPolicy as a dict, given as `--policy FILE`) when given."""

    def __init__(self, upstream, policy=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env.update(OPENAI_BASE_URL=f"{upstream.url}/v1", OPENAI_API_KEY=SERVER_OPENAI_KEY,
                   ANTHROPIC_BASE_URL=upstream.url, ANTHROPIC_API_KEY=SERVER_ANTHROPIC_KEY,
                   RUST_LOG=os.environ.get("RUST_LOG", "error"))
        port = free_port()
        args = [os.environ.get("LLM_CONTEXT_BIN", "target/debug/llm-context"), "serve",
                "--listen", f"127.0.0.1:{port}"]
        self.policy_file = None
        if policy is not None:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(policy, f)
            self.policy_file = f.name
            args += ["--policy", f.name]
        self.process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(400):
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1).read()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        self.close()
        raise RuntimeError(f"serve did not start: {self.process.stderr.read().decode()[-2000:]}")

    def close(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stderr.close()
        if self.policy_file:
            os.unlink(self.policy_file)


def without_additions(wire, direct, through):
    """`through` (a body the upstream got through the proxy) less only the stack's
    documented additions, each only where `direct` (the same client's direct body) does
    not have it: the read tool after the client's tools; on Chat Completions and the
    Responses API `prompt_cache_key` when the client set none and `stream_options.include_usage` on a
    streamed call whose client did not ask for the usage; on Messages the `{"type": "ephemeral"}`
    breakpoints it adds when the client placed fewer than four. Returns the body and the
    names of what was removed."""
    body = copy.deepcopy(through)
    removed = []
    tools = body.get("tools") or []
    name = (lambda t: t.get("function", {}).get("name")) if wire == "chat" else (lambda t: t.get("name"))
    if tools and name(tools[-1]) == READ_TOOL and READ_TOOL not in [name(t) for t in direct.get("tools") or []]:
        tools.pop()
        removed.append(READ_TOOL)
    if wire == "responses":
        if "prompt_cache_key" in body and "prompt_cache_key" not in direct:
            del body["prompt_cache_key"]
            removed.append("prompt_cache_key")
        return body, removed
    if wire == "chat":
        if "prompt_cache_key" in body and "prompt_cache_key" not in direct:
            del body["prompt_cache_key"]
            removed.append("prompt_cache_key")
        # A streamed call asks for the usage, which the proxy meters.
        theirs = direct.get("stream_options")
        ours = body.get("stream_options")
        if body.get("stream") is True and isinstance(ours, dict) and ours.get("include_usage") is True \
                and not (isinstance(theirs, dict) and theirs.get("include_usage") is True):
            if theirs is None and ours == {"include_usage": True}:
                del body["stream_options"]
            else:
                ours.pop("include_usage")
                if isinstance(theirs, dict) and "include_usage" in theirs:
                    ours["include_usage"] = theirs["include_usage"]
            removed.append("stream_options.include_usage")
        return body, removed
    if _markers(direct) < 4:
        for kind, ours, theirs in _blocks(body, direct):
            marker = ours.get("cache_control")
            if marker is not None and "cache_control" not in theirs \
                    and marker.get("type") == "ephemeral" and set(marker) <= {"type", "ttl"}:
                del ours["cache_control"]
                removed.append(f"cache_control on {kind}")
        # A marker needs a block: a string the client sent (the system prompt, a
        # message's content) carries it as that one text block. Back to the string.
        def unmarked(mine, theirs):
            return (mine if not isinstance(theirs, str) or mine != [{"type": "text", "text": theirs}]
                    else theirs)
        if any(r.startswith("cache_control on system") for r in removed):
            body["system"] = unmarked(body.get("system"), direct.get("system"))
        for m, message in enumerate(body.get("messages") or []):
            if any(r.startswith(f"cache_control on messages[{m}]") for r in removed) \
                    and m < len(direct.get("messages") or []):
                message["content"] = unmarked(message.get("content"),
                                              direct["messages"][m].get("content"))
    return body, removed


def _markers(body):
    return sum("cache_control" in b for _, b, _ in _blocks(body, body))


def _blocks(body, other):
    """(where, block of `body`, the block at the same place in `other` or {}): the places a
    breakpoint can go (tools, system blocks, message content blocks)."""
    def at(seq, i):
        return seq[i] if isinstance(seq, list) and i < len(seq) and isinstance(seq[i], dict) else {}

    for i, t in enumerate(body.get("tools") or []):
        yield f"tools[{i}]", t, at(other.get("tools"), i)
    if isinstance(body.get("system"), list):
        for i, b in enumerate(body["system"]):
            yield f"system[{i}]", b, at(other.get("system"), i)
    for m, message in enumerate(body.get("messages") or []):
        if isinstance(message.get("content"), list):
            theirs = at(other.get("messages"), m).get("content")
            for i, b in enumerate(message["content"]):
                if isinstance(b, dict):
                    yield f"messages[{m}].content[{i}]", b, at(theirs, i)


def json_diff(direct, through, path="$", ordered=False):
    """Where `through` differs from `direct`, as JSON, one line each. Key order counts
    only where the model reads it: in a tool's JSON schema (`parameters`, `input_schema`:
    the model writes the arguments in the order of its properties) and in a tool call's
    `input` (the model's own output, sent back to it); elsewhere objects are unordered."""
    def show(v):
        text = _dumps(v)
        return text if len(text) < 300 else text[:300] + "…"

    if ordered and direct == through and _dumps(direct) != _dumps(through):
        return [f"{path}: the same JSON with its keys re-ordered: direct {show(direct)}, "
                f"through serve {show(through)}"]
    if isinstance(direct, dict) and isinstance(through, dict):
        out = []
        for k in direct:
            if k not in through:
                out.append(f"{path}.{k}: dropped (direct: {show(direct[k])})")
            else:
                out += json_diff(direct[k], through[k], f"{path}.{k}",
                                 ordered or k in ("parameters", "input_schema", "input"))
        out += [f"{path}.{k}: added {show(through[k])}" for k in through if k not in direct]
        return out
    if isinstance(direct, list) and isinstance(through, list):
        out = []
        for i, (a, b) in enumerate(zip(direct, through)):
            out += json_diff(a, b, f"{path}[{i}]", ordered)
        out += [f"{path}[{i}]: dropped (direct: {show(v)})" for i, v in enumerate(direct[len(through):], len(through))]
        out += [f"{path}[{i}]: added {show(v)}" for i, v in enumerate(through[len(direct):], len(direct))]
        return out
    if direct == through and type(direct) is type(through):
        return []
    return [f"{path}: direct {show(direct)}, through serve {show(through)}"]


class ToolLoop(unittest.TestCase):
    """A test class's recording fakes (one the client reaches directly, one behind the
    proxy) and its `serve`, shared by the class's tests.

    A subclass names its cases in CASES, name → (wire, run, stream): `wire` "chat" or
    "messages" or "responses", `run(root_url)` the client's two-round tool loop against a server whose
    root is `root_url`, returning the final text, and `stream` the `stream` flag the
    client sends. Each case is run once (directly, then through serve) for two tests:
    `check_completed` (both loops completed, two model calls each, the server's key
    upstream) and `check_bodies` (the upstream bodies equal but for the stack's documented
    additions), so that a difference in the bodies, marked as an expected failure until
    the proxy is fixed, does not hide whether the loop completes."""

    maxDiff = None
    CASES = {}
    POLICY = None  # serve's `--policy`, as a dict

    @classmethod
    def setUpClass(cls):
        cls.runs = {}
        cls.direct = Recording()
        cls.through = Recording()
        try:
            cls.serve = Serve(cls.through, cls.POLICY)
        except Exception:
            cls.direct.close()
            cls.through.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.serve.close()
        cls.direct.close()
        cls.through.close()

    def loop(self, name):
        """Case `name` run directly and through serve (once per class): its wire, the two
        outcomes (final text or exception) and the two lists of model calls recorded."""
        if name not in self.runs:
            wire, run, _ = self.CASES[name]
            self.direct.reset()
            self.through.reset()
            outcomes = []
            for url in (self.direct.url, self.serve.url):
                try:
                    outcomes.append(run(url))
                except Exception as e:  # reported by check_completed
                    outcomes.append(e)
            sent = (self.direct.calls(wire), self.through.calls(wire))
            dump = os.environ.get("LLM_CONTEXT_AGENTS_DUMP")  # a folder for the raw bodies
            if dump:
                os.makedirs(dump, exist_ok=True)
                for side, calls in zip(("direct", "through"), sent):
                    for i, r in enumerate(calls):
                        path = f"{type(self).__name__}.{name}.{side}.{i + 1}.json"
                        with open(os.path.join(dump, path), "wb") as f:
                            f.write(r["raw"])
            self.runs[name] = (wire, outcomes, sent)
        return self.runs[name]

    def check_completed(self, name):
        """Both loops of case `name` completed, with two model calls each and the server's
        key (not the client's) upstream, the second carrying the tool's result."""
        wire, outcomes, (sent_direct, sent_through) = self.loop(name)
        self._completed(name)
        # The second round carries the tool's result as the client ran it.
        for sent in (sent_direct, sent_through):
            self.assertIn(tool_result(**ARGS), json.dumps(sent[1]["body"], ensure_ascii=False))

    def _completed(self, name):
        """check_completed but for the tool's result."""
        wire, outcomes, (sent_direct, sent_through) = self.loop(name)
        for side, outcome in zip(("direct", "through serve"), outcomes):
            if isinstance(outcome, BaseException):
                raise AssertionError(f"the run {side} failed: {outcome!r}") from outcome
            self.assertEqual(outcome, FINAL, f"the run {side} did not complete")
        self.assertEqual(len(sent_direct), 2, [r["body"] for r in sent_direct])
        self.assertEqual(len(sent_through), 2, [r["body"] for r in sent_through])
        stream = self.CASES[name][2]
        openai = wire in ("chat", "responses")
        key, client_key = ((SERVER_OPENAI_KEY, CLIENT_OPENAI_KEY) if openai
                           else (SERVER_ANTHROPIC_KEY, CLIENT_ANTHROPIC_KEY))
        for a, b in zip(sent_direct, sent_through):
            self.assertEqual(bool(a["body"].get("stream")), stream)
            self.assertIn(client_key, json.dumps(a["headers"]))  # the client sent its own
            self.assertNotIn(client_key, json.dumps(b["headers"]))
            if openai:
                self.assertEqual(b["headers"].get("authorization"), f"Bearer {key}")
            else:
                self.assertEqual(b["headers"].get("x-api-key"), key)
            self.assertEqual(a["path"], b["path"])
            for h in ("anthropic-version", "anthropic-beta"):
                self.assertEqual(a["headers"].get(h), b["headers"].get(h), h)

    def check_bodies(self, name):
        """The bodies the upstream got through serve in case `name` are the direct run's
        but for the stack's documented additions (`without_additions`), key order
        included where the model reads it (`json_diff`)."""
        wire, _, (sent_direct, sent_through) = self.loop(name)
        self.assertTrue(sent_direct, "nothing reached the upstream directly")
        self.assertEqual(len(sent_direct), len(sent_through), "not as many model calls")
        differences = []
        for i, (a, b) in enumerate(zip(sent_direct, sent_through)):
            body, removed = without_additions(wire, a["body"], b["body"])
            if READ_TOOL not in removed:
                differences.append(f"body {i + 1}: no {READ_TOOL} after the client's tools")
            differences += [f"body {i + 1}: {d}" for d in json_diff(a["body"], body)]
        self.assertEqual(differences, [], "the upstream bodies through serve differ from "
                         "the direct run's by more than the documented additions")


# What stands for the offloaded result's content in both bodies once the preview was
# checked (check_offloaded): the one place the two may differ.
OFFLOADED = "<the offloaded tool result>"


def result_text(content):
    """A tool result's content as text: a string, or the text of text blocks (the only
    block kind a text result has); None for any other content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
            for b in content):
        return "".join(b["text"] for b in content)
    return None


def tool_results(wire, body):
    """(path, content) of every tool result in `body`, the path a list of keys: on Chat
    Completions a `role: "tool"` message's `content`, on Messages a `tool_result` block's."""
    out = []
    for m, message in enumerate(body.get("messages") or []):
        if wire == "chat":
            if message.get("role") == "tool":
                out.append((["messages", m, "content"], message.get("content")))
        elif isinstance(message.get("content"), list):
            for i, b in enumerate(message["content"]):
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    out.append((["messages", m, "content", i, "content"], b.get("content")))
    return out


def _at(body, path):
    for k in path:
        body = body[k]
    return body


def _put(body, path, value):
    _at(body, path[:-1])[path[-1]] = value


class OffloadLoop(ToolLoop):
    """ToolLoop with serve under OFFLOAD_POLICY and a tool answering large_tool_result:
    serve offloads the result, and the upstream bodies through it differ from the direct
    run's only there (`check_offloaded`). A subclass's CASES run the client with the large
    tool."""

    POLICY = OFFLOAD_POLICY

    def check_completed(self, name):
        """Both loops completed (two model calls each, the server's key upstream), the
        direct second round carrying the large result in full and the one through serve
        a preview in its place (`assert_preview`), the result in full nowhere. (Checked
        here too so that an expected failure of check_offloaded hides no bad preview.)"""
        wire, _, (sent_direct, sent_through) = self.loop(name)
        self._completed(name)
        original = large_tool_result(**ARGS)
        place = self._offloaded_place(wire, sent_direct[1]["body"])
        self.assert_preview(self._text_at(sent_through[1]["body"], place), original)
        # Not in full anywhere through serve: as a JSON string (the body's escapes) or as text.
        self.assertNotIn(_dumps(original)[1:-1], _dumps(sent_through[1]["body"]))
        self.assertNotIn(original, [result_text(c) for _, c in tool_results(wire, sent_through[1]["body"])])

    def _offloaded_place(self, wire, direct):
        """The path of the one tool result of `direct` that is the large result."""
        original = large_tool_result(**ARGS)
        places = [p for p, c in tool_results(wire, direct) if result_text(c) == original]
        self.assertEqual(len(places), 1, "the direct second body holds the large result once")
        return places[0]

    def _text_at(self, body, place):
        """The text of the tool result at `place` in `body` (through serve)."""
        try:
            text = result_text(_at(body, place))
        except (KeyError, IndexError, TypeError):
            text = None
        self.assertIsNotNone(text, f"no text tool result at {place} through serve")
        return text

    def check_offloaded(self, name):
        """The first bodies equal but for the documented additions (`without_additions`);
        the second too, but for the offloaded result's content: through serve a preview
        (shorter than the result, naming its `art_…` artifact and the read tool, holding
        the result's beginning), which is checked and then replaced by OFFLOADED in both
        bodies before they are compared. Every other message and field equal."""
        wire, _, (sent_direct, sent_through) = self.loop(name)
        self.assertEqual(len(sent_direct), 2, "not two model calls directly")
        self.assertEqual(len(sent_through), 2, "not two model calls through serve")
        original = large_tool_result(**ARGS)
        differences = []
        for i, (a, b) in enumerate(zip(sent_direct, sent_through)):
            direct = copy.deepcopy(a["body"])
            body, removed = without_additions(wire, direct, b["body"])
            if READ_TOOL not in removed:
                differences.append(f"body {i + 1}: no {READ_TOOL} after the client's tools")
            if i == 1:
                place = self._offloaded_place(wire, direct)
                self.assert_preview(self._text_at(body, place), original)
                _put(direct, place, OFFLOADED)
                _put(body, place, OFFLOADED)
            differences += [f"body {i + 1}: {d}" for d in json_diff(direct, body)]
        self.assertEqual(differences, [], "the upstream bodies through serve differ from the "
                         "direct run's by more than the documented additions and the "
                         "offloaded result")

    def assert_preview(self, preview, original):
        """`preview` stands for `original`: shorter, naming an `art_…` artifact, telling
        the model to read the rest with the read tool, and holding its beginning."""
        self.assertLess(len(preview), len(original))
        self.assertRegex(preview, r"\bart_[0-9a-f]{16,}\b")
        self.assertIn(READ_TOOL, preview)
        shown = json.loads(preview)  # the documented preview is JSON
        self.assertTrue(shown["context_artifact"].startswith("art_"), shown)
        self.assertIn(shown["context_artifact"], preview)
        self.assertTrue(original.startswith(shown["preview"]), shown["preview"][:200])
        self.assertGreater(len(shown["preview"]), 0)

    def check_reported(self, name):
        """serve reports the offload in its answer's headers (`x-llm-context-offloaded:
        1`). The client's own call shows them to nobody, so the second request the client
        sent (as the direct fake got it) is sent to serve again, headers and body, in a
        session of its own (`x-llm-context-session`) so the offload is new."""
        wire, _, (sent_direct, _) = self.loop(name)
        r = sent_direct[1]
        skip = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding"}
        headers = {k: v for k, v in r["headers"].items() if k not in skip}
        headers["x-llm-context-session"] = f"replay-{type(self).__name__}-{name}"
        request = urllib.request.Request(self.serve.url + r["path"], data=r["raw"],
                                         headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
            self.assertEqual(answer.status, 200)
            self.assertEqual(answer.headers.get("x-llm-context-offloaded"), "1")
