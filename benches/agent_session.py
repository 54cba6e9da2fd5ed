#!/usr/bin/env python3
"""The proxy at agent size: a growing Claude Code session through `llm-context serve`.

    python3 benches/agent_session.py                 # ~570 KB median, plain and streamed
    SIZE=1200 python3 benches/agent_session.py       # ~1.2 MB median
    FORMAT=chat python3 benches/agent_session.py     # the OpenAI Agents SDK's shape
    FORMAT=responses python3 benches/agent_session.py  # Codex's shape
    BIN=target/release/llm-context FAKE=target/release/examples/fake_upstream \\
        python3 benches/agent_session.py             # prebuilt binaries

What a real agent sends, and what no gateway benchmark measures: every request is the
session's previous request plus one tool round (an assistant turn with its thinking block,
text and `tool_use`, then the user message with the results), the whole transcript each
time, Claude Code's cache marker moved to the newest block. The bodies are Claude
Code-shaped Messages requests (benches/support/gen_claude_code_body.py: its system prompt
blocks, 20 tools with JSON Schemas, signed thinking blocks, metadata, `thinking` on), over
the project's seeded transcript (gen_transcript.py `--seed 1`, JSON, logs, code, non-ASCII
text, three results in ten large), sent with Claude Code's headers and one session id.

For each mode (plain, then streamed) it starts the fake upstream
(examples/fake_upstream.rs, which answers at once) and a fresh `serve` (default policy: the
window is larger than every body, so nothing is pruned and the figure is the cost of
reading, deciding and forwarding), then sends the session's requests in order over one
keep-alive connection each: 20 warm-up requests, then 200 timed ones, each sent directly
to the upstream and through the proxy (the same bytes). Added = through − direct, at p50
and p99 of the timed requests; `serve`'s CPU time (all its threads, the ledger's
included) over the timed requests, per request; requests/s is one client's, through the
proxy. Memory:
`serve`'s peak resident set (VmHWM) after the run, over its resident set when idle before
it, and that over the largest body sent.

LITELLM=1 (FORMAT=messages only) measures LiteLLM's proxy beside `serve` in the same run,
on the same bodies and headers: LiteLLM proxy 1.108.7 (`litellm[proxy]==1.108.7`, which
installs with Python 3.11), installed on first use into a virtualenv outside the
repository, `${XDG_CACHE_HOME:-$HOME/.cache}/llm-context-bench/litellm-1.108.7` (`python3
-m venv` and its pip; about 760 MB), and reused after. For each mode, after `serve`'s row,
it starts a fresh fake upstream and one LiteLLM proxy process (its own server, one worker)
with a generated config in a temporary folder: the benchmark's model
(`claude-sonnet-4-5`) routed to `anthropic/claude-sonnet-4-5` at the fake upstream with a
dummy key, a generated master key (LiteLLM refuses to start without one; the requests
carry it as their `x-api-key`), no database, telemetry vetoed (LITELLM_TELEMETRY_DISABLED),
the local model cost map, LITELLM_LOG=ERROR. Once its /health/liveliness answers, the
session goes through its `/v1/messages` route (a pass-through to the Anthropic-compatible
upstream) exactly as through `serve`, and its row, `litellm 1.108.7 (plain)` or
`(stream)`, has the same columns (its CPU and memory are the LiteLLM process's). Requests
it answers with an error, or whose connection breaks, are counted in the row's label and
left out of the percentiles, the first one shown on stderr; if it cannot be installed or
does not start, one line says so and its rows are skipped. Off by default: without it
the run is as before.

FORMAT=chat sends the same session as an OpenAI Agents SDK-shaped Chat Completions request
to /v1/chat/completions, FORMAT=responses as a Codex-shaped Responses request (reasoning
items with `encrypted_content`, function calls and outputs, a `prompt_cache_key`) to
/v1/responses, both for GPT-5.4 (benches/support/gen_openai_body.py).

Environment: FORMAT (messages, chat or responses; default messages), SIZE (the median body
in KB, default 570), WARMUP (20), TIMED (200),
BIG_RATIO (gen_transcript's share of large results, default 0.05: ~1.1 KB a message), BIN
and FAKE (prebuilt binaries; else both are built in release), LITELLM (1 to measure
LiteLLM's proxy too; default off), WINDOW (a `max_context_tokens` for `serve`'s policy,
smaller than the session, so that it prunes: the pruning case; default none, the
default policy, whose window holds every body). Standard library only.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "support"))

import gen_claude_code_body as cc  # noqa: E402
import gen_openai_body as oa  # noqa: E402

FORMAT = os.environ.get("FORMAT", "messages")
if FORMAT not in ("messages", "chat", "responses"):
    raise SystemExit(f"FORMAT is messages, chat or responses, not {FORMAT!r}")
PATH = {"messages": "/v1/messages", "chat": "/v1/chat/completions",
        "responses": "/v1/responses"}[FORMAT]

LITELLM = os.environ.get("LITELLM", "") == "1"
# A window smaller than the session (in tokens): serve prunes every request past it.
WINDOW = int(os.environ.get("WINDOW", "0"))
LITELLM_VERSION = "1.108.7"

# Large results in one of twenty: a session of ~1.1 KB per message, as the issue's
# measured Claude Code session (574 KB at ~520 messages).
BIG_RATIO = os.environ.get("BIG_RATIO", "0.05")
SESSION = "5f0c7c2e-3c1e-4d7a-9b7e-1f3a2c4d5e6f"
HEADERS = {
    "content-type": "application/json",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
                      "fine-grained-tool-streaming-2025-05-14",
    "x-api-key": "unused",
    "x-claude-code-session-id": SESSION,
    "user-agent": "claude-cli/2.1.0 (external, cli)",
}
if FORMAT == "chat":
    HEADERS = {"content-type": "application/json", "authorization": "Bearer unused",
               "user-agent": "Agents/Python 0.6.1"}
elif FORMAT == "responses":
    HEADERS = {"content-type": "application/json", "authorization": "Bearer unused",
               "user-agent": "codex_cli_rs/0.171.0", "originator": "codex_cli_rs",
               "session_id": oa.SESSION}


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def session(median_kb: int, warmup: int, timed: int, stream: bool) -> list[bytes]:
    """`warmup + timed` request bodies of one growing session, each one tool round
    longer than the one before, the median timed one about `median_kb` KB."""
    chat = json.loads(subprocess.run(
        [sys.executable, os.path.join(HERE, "support", "gen_transcript.py"), "--seed", "1",
         "--turns", "1200", "--big-ratio", BIG_RATIO, "--format", "messages"],
        check=True, capture_output=True).stdout)
    if FORMAT == "messages":
        messages = cc.convert(chat, True)
    else:
        messages = [m for m in chat if m["role"] != "system"]
    # Where each round ends: a user message (of results), the next one an assistant's.
    ends = [i + 1 for i in range(len(messages) - 1)
            if messages[i]["role"] in ("user", "tool")
            and messages[i + 1]["role"] == "assistant"]

    def body_at(n: int) -> bytes:
        if FORMAT == "messages":
            out = cc.body(chat, n, True, stream)
        elif FORMAT == "chat":
            out = oa.chat_body(chat, n, stream)
        else:
            out = oa.responses_body(chat, n, stream)
        return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()

    # The round whose body is the median size: found by bisection over the round ends.
    lo, hi = 0, len(ends) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if len(body_at(ends[mid])) < median_kb * 1000:
            lo = mid + 1
        else:
            hi = mid
    count = warmup + timed
    first = max(0, lo - warmup - timed // 2)
    if first + count > len(ends):
        raise SystemExit(f"the transcript has too few rounds for {count} requests at "
                         f"{median_kb} KB")
    return [body_at(n) for n in ends[first:first + count]]


def rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of `pid`, in bytes."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def cpu_seconds(pid: int) -> float:
    """The CPU time `pid` has used (user and system, all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_up(port: int, process: subprocess.Popen) -> None:
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if process.poll() is not None:
                raise SystemExit(f"a server did not start: {process.stderr.read()[-2000:]}")
            time.sleep(0.05)
    raise SystemExit("a server did not start in 20 s")


def send(conn: http.client.HTTPConnection, body: bytes, headers: dict = HEADERS,
         errors: list[str] | None = None) -> float | None:
    """One request's time, in ms, from its first byte sent to its answer read whole. An
    error answer (or a broken connection) ends the run, or, given `errors`, is added to it
    and the time is None."""
    start = time.perf_counter()
    try:
        conn.request("POST", PATH, body=body, headers=headers)
        answer = conn.getresponse()
        text = answer.read()
    except (http.client.HTTPException, OSError) as e:
        if errors is None:
            raise
        conn.close()  # the next request opens a new connection
        errors.append(repr(e))
        return None
    took = (time.perf_counter() - start) * 1000
    if answer.status != 200:
        if errors is None:
            raise SystemExit(f"answered {answer.status}")
        errors.append(f"{answer.status}: {text[:300].decode(errors='replace')}")
        return None
    return took


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def start_serve(bin_path: str, folder: str):
    """How to start `serve` on a port, in front of the upstream on another; with WINDOW,
    under a policy of that window (written into `folder`)."""
    policy = []
    if WINDOW:
        path = os.path.join(folder, "window.toml")
        with open(path, "w") as f:
            f.write(f"max_context_tokens = {WINDOW}\n")
        policy = ["--policy", path]

    def start(up_port: int, port: int) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        env.update(ANTHROPIC_BASE_URL=f"http://127.0.0.1:{up_port}",
                   ANTHROPIC_API_KEY="unused",
                   OPENAI_BASE_URL=f"http://127.0.0.1:{up_port}/v1", OPENAI_API_KEY="unused",
                   RUST_LOG="error")
        return subprocess.Popen([bin_path, "serve", "--listen", f"127.0.0.1:{port}", *policy],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
    return start


def run(start_proxy, fake: str, bodies: list[bytes], warmup: int, ready=wait_up,
        headers: dict = HEADERS, tolerate: bool = False) -> dict:
    """The session through a fresh upstream and the proxy `start_proxy` starts in front of
    it (`ready` waits for it), each request sent directly and through it. With `tolerate`
    the proxy's errors are counted, not fatal."""
    up_port, port = free_port(), free_port()
    upstream = subprocess.Popen([fake, f"127.0.0.1:{up_port}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    proxy = start_proxy(up_port, port)
    errors: list[str] | None = [] if tolerate else None
    try:
        wait_up(up_port, upstream)
        ready(port, proxy)
        idle, _ = rss(proxy.pid)
        direct = http.client.HTTPConnection("127.0.0.1", up_port)
        through = http.client.HTTPConnection("127.0.0.1", port)
        times_direct, times_through = [], []
        started = time.perf_counter()
        cpu_started = None
        for i, body in enumerate(bodies):
            if i == warmup:
                cpu_started = cpu_seconds(proxy.pid)
            d = send(direct, body)
            t = send(through, body, headers, errors)
            if i >= warmup and t is not None:
                times_direct.append(d)
                times_through.append(t)
        cpu = cpu_seconds(proxy.pid) - cpu_started
        elapsed = time.perf_counter() - started
        _, peak = rss(proxy.pid)
        direct.close()
        through.close()
    finally:
        for p in (proxy, upstream):
            p.terminate()
            p.wait(timeout=30)
    if not times_through:
        raise RuntimeError(f"every request failed, the first: {errors[0]}")
    timed = bodies[warmup:]
    return {
        "median_body": statistics.median(len(b) for b in timed),
        "largest_body": max(len(b) for b in bodies),
        "direct_p50": percentile(times_direct, 50),
        "direct_p99": percentile(times_direct, 99),
        "through_p50": percentile(times_through, 50),
        "through_p99": percentile(times_through, 99),
        "added_p50": percentile(times_through, 50) - percentile(times_direct, 50),
        "added_p99": percentile(times_through, 99) - percentile(times_direct, 99),
        "rps": len(bodies) / elapsed,
        "cpu_ms": cpu * 1000 / len(timed),
        "peak_over_idle": peak - idle,
        "errors": errors or [],
    }


def litellm_venv() -> str | None:
    """The virtualenv of LiteLLM's proxy at LITELLM_VERSION, outside the repository:
    installed on first use, reused after; None, said on stdout, if it cannot be."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".cache")
    venv = os.path.join(cache, "llm-context-bench", f"litellm-{LITELLM_VERSION}")
    done = os.path.join(venv, ".installed")
    if os.path.exists(done):
        return venv
    print(f"installing litellm[proxy]=={LITELLM_VERSION} into {venv}", file=sys.stderr,
          flush=True)
    started = time.perf_counter()
    for step in ([sys.executable, "-m", "venv", venv],
                 [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet",
                  "--disable-pip-version-check", f"litellm[proxy]=={LITELLM_VERSION}"]):
        out = subprocess.run(step, capture_output=True, text=True)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            print(f"LiteLLM {LITELLM_VERSION} could not be installed ({last}): "
                  "its rows are skipped", flush=True)
            return None
    open(done, "w").close()
    print(f"installed in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return venv


def start_litellm(venv: str, folder: str, key: str):
    """How to start LiteLLM's proxy on a port, the benchmark's model routed to the
    upstream on another: its config (JSON, which is YAML) written in `folder`."""
    def start(up_port: int, port: int) -> subprocess.Popen:
        config = {
            "model_list": [{"model_name": cc.MODEL, "litellm_params": {
                "model": f"anthropic/{cc.MODEL}", "api_base": f"http://127.0.0.1:{up_port}",
                "api_key": "unused"}}],
            "litellm_settings": {"telemetry": False, "set_verbose": False},
            "general_settings": {"master_key": key, "disable_spend_logs": True},
        }
        path = os.path.join(folder, "config.yaml")
        with open(path, "w") as f:
            json.dump(config, f)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENAI_", "ANTHROPIC_", "LITELLM_", "DATABASE_"))}
        env.update(LITELLM_LOG="ERROR", LITELLM_MODE="PRODUCTION",
                   LITELLM_TELEMETRY_DISABLED="true", LITELLM_LOCAL_MODEL_COST_MAP="True",
                   LITELLM_DONT_SHOW_FEEDBACK_BOX="true", DISABLE_ADMIN_UI="true",
                   NO_DOCS="true")
        # Its log to a file, not a pipe nobody reads while it runs.
        with open(os.path.join(folder, "litellm.log"), "w") as log:
            return subprocess.Popen([os.path.join(venv, "bin", "litellm"), "--config", path,
                                     "--host", "127.0.0.1", "--port", str(port),
                                     "--num_workers", "1"],
                                    cwd=folder, env=env, stdout=subprocess.DEVNULL,
                                    stderr=log)
    return start


def wait_healthy(folder: str):
    """How to wait for LiteLLM, started in `folder`: until its liveliness route answers
    (its start takes seconds, more on a busy machine), at most 180 s."""
    def ready(port: int, process: subprocess.Popen) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness",
                                            timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if process.poll() is not None:
                with open(os.path.join(folder, "litellm.log")) as log:
                    raise RuntimeError(f"it did not start: {log.read()[-2000:]}")
            time.sleep(0.2)
        raise RuntimeError("it did not answer in 180 s")
    return ready


def row(label: str, r: dict) -> str:
    return (f"| {label} | {r['median_body'] / 1000:.0f} KB "
            f"| {r['direct_p50']:.3f} ms | {r['through_p50']:.3f} ms "
            f"| **{r['added_p50']:.3f} ms** | {r['added_p99']:.3f} ms "
            f"| {r['cpu_ms']:.2f} ms | {r['rps']:.0f} "
            f"| {r['peak_over_idle'] / 1e6:.1f} MB "
            f"| {r['peak_over_idle'] / r['largest_body']:.1f}× |")


def main() -> int:
    size = int(os.environ.get("SIZE", "570"))
    warmup = int(os.environ.get("WARMUP", "20"))
    timed = int(os.environ.get("TIMED", "200"))
    bin_path = os.environ.get("BIN")
    fake = os.environ.get("FAKE")
    if not (bin_path and fake):
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "llm-context",
                        "--example", "fake_upstream"], cwd=ROOT, check=True)
        bin_path = os.path.join(ROOT, "target", "release", "llm-context")
        fake = os.path.join(ROOT, "target", "release", "examples", "fake_upstream")
    venv = None
    if LITELLM and FORMAT != "messages":
        print(f"LiteLLM is measured with FORMAT=messages only: skipped for {FORMAT}")
    elif LITELLM:
        venv = litellm_venv()
    key = "sk-bench-" + secrets.token_hex(16)
    litellm_headers = dict(HEADERS, **{"x-api-key": key})
    print(f"{FORMAT} ({PATH})" + (f", window {WINDOW} tokens" if WINDOW else ""))
    print("| mode | median body | direct p50 | proxy p50 | added p50 | added p99 "
          "| serve CPU / request | req/s (1 client, both hops) | peak over idle "
          "| × largest body |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="agent-session-") as folder:
        for stream in (False, True):
            mode = "stream" if stream else "plain"
            bodies = session(size, warmup, timed, stream)
            r = run(start_serve(bin_path, folder), fake, bodies, warmup)
            print(row(mode, r), flush=True)
            if venv is None:
                continue
            try:
                r = run(start_litellm(venv, folder, key), fake, bodies, warmup,
                        ready=wait_healthy(folder), headers=litellm_headers, tolerate=True)
            except RuntimeError as e:
                print(f"LiteLLM {LITELLM_VERSION} ({mode}) skipped: {e}", flush=True)
                continue
            label = f"litellm {LITELLM_VERSION} ({mode})"
            if r["errors"]:
                label = (f"litellm {LITELLM_VERSION} ({mode}; {len(r['errors'])} errors "
                         f"in {len(bodies)})")
                print(f"LiteLLM's first error: {r['errors'][0]}", file=sys.stderr)
            print(row(label, r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
