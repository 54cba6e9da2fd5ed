#!/usr/bin/env bash
# The proxy's load benchmark: what `llm-context serve` adds to a call, and how many calls
# a second it serves, on its three routes, streamed and not: Chat Completions at 20 and
# 500 messages per request, Anthropic Messages at 20 and at an agent-sized, Claude
# Code-shaped body (about 200 messages), the Responses API at 20 and 500 messages as
# Codex sends them; and its peak memory per request in flight at the agent size.
#
#   bash benches/serve.sh            # figures as Markdown tables on stdout
#
# What it does:
# - installs the load generator oha (pinned, with `cargo install --locked`, into a cache
#   directory outside the repository) where it is missing;
# - builds `llm-context` and the fake upstream (`examples/fake_upstream.rs`) in release;
# - makes the request bodies from the project's seeded transcript generator
#   (benches/support/gen_transcript.py --seed 1: JSON, logs, code, non-ASCII; the
#   first 20 and 500 messages of one agent transcript, as Chat Completions), and as
#   Messages (benches/support/gen_claude_code_body.py): the same transcript's first 20
#   messages with its short system prompt, and an agent-sized body of 200 messages (the
#   same generator with more large tool results: 770 KB, 142k tokens) as Claude Code
#   sends them (system prompt blocks with cache markers, 20 tools, thinking blocks,
#   metadata), sent with Claude Code's headers (`anthropic-version`, `anthropic-beta`,
#   its session id);
# - starts the fake upstream (both routes) and `serve` in front of it on 127.0.0.1, and
#   for each case measures latency one request at a time (`-c 1`) against the upstream
#   directly and through the proxy (added = through − direct, at p50 and p99), then
#   throughput through the proxy with many connections (`-c 64` for 10 s);
# - prints what `serve` did to each body (its `x-llm-context-*` headers) and where its
#   time went (the means of its `/metrics` phases over the `-c 1` run);
# - memory: for plain and streamed, one request alone and `MEM_INFLIGHT` (default 8) at
#   once, starts a fresh `serve`, reads its idle VmRSS after a small warm-up, sends the
#   agent-sized requests together to an upstream that waits 1 s before answering (so that
#   all are in flight at once, as with a real model), and reads its VmHWM (peak RSS)
#   after: (peak − idle) / requests is the memory per request in flight, and its ratio
#   to the body;
# - stops the servers by their pids whatever happens.
#
# Environment: CASES (e.g. "responses 20,responses 500": only those), OHA (a path to an
# oha binary, to skip the install), REQUESTS (latency
# samples per case, default 2000), DURATION (throughput run, default 10s), OTLP=1 (build
# with the `otel` feature and run `serve --otlp-endpoint` against the fake upstream, which
# also accepts OTLP/HTTP: what exporting every request's spans costs; without it, the
# same binary exports nothing), MEM_INFLIGHT (the memory case's requests at once).
set -euo pipefail

cd "$(dirname "$0")/.."

OHA_VERSION=1.16.0
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llm-context-bench"
REQUESTS="${REQUESTS:-2000}"
DURATION="${DURATION:-10s}"
MEM_INFLIGHT="${MEM_INFLIGHT:-8}"

OHA="${OHA:-$CACHE/oha-$OHA_VERSION/bin/oha}"
if [ ! -x "$OHA" ]; then
    echo "serve.sh: installing oha $OHA_VERSION into $CACHE (a few minutes)" >&2
    cargo install --locked --quiet --root "$CACHE/oha-$OHA_VERSION" oha --version "$OHA_VERSION"
fi

FEATURES=()
if [ -n "${OTLP:-}" ]; then
    FEATURES=(--features otel)
fi
cargo build --release --quiet "${FEATURES[@]}" --bin llm-context --example fake_upstream
BIN=target/release/llm-context
FAKE=target/release/examples/fake_upstream

WORK=$(mktemp -d -t llm-context-serve-bench.XXXXXX)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() {
    for _ in $(seq 200); do
        if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), 0.1)" 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    echo "serve.sh: nothing listens on port $1" >&2
    exit 1
}


# Bodies: one agent transcript, cut to its first N messages, compact JSON as SDKs send.
python3 benches/support/gen_transcript.py --seed 1 --turns 200 --format messages \
    >"$WORK/transcript.json"
python3 - "$WORK" <<'EOF'
import json, sys
work = sys.argv[1]
messages = json.load(open(f"{work}/transcript.json"))
for n in (20, 500):
    head = messages[:n]
    for stream in (False, True):
        body = {"model": "gpt-5.4", "messages": head}
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        name = f"{work}/chat-{n}-{'stream' if stream else 'plain'}.json"
        with open(name, "w") as f:
            json.dump(body, f, ensure_ascii=False, separators=(",", ":"))
EOF
# Responses, as Codex sends them (instructions, items, its `exec_command` tool, `store`
# false, `include` of encrypted reasoning, its own `prompt_cache_key`): the same
# transcript's first 20 and 500 messages as items, each tool call a `function_call` and
# its result a `function_call_output`, each assistant turn with a reasoning item first.
python3 - "$WORK" <<'EOF'
import json, sys
work = sys.argv[1]
messages = json.load(open(f"{work}/transcript.json"))
def items(head):
    out, instructions, n = [], None, 0
    for m in head:
        content = m.get("content")
        text = content if isinstance(content, str) else "".join(
            p.get("text", "") for p in content or [])
        if m["role"] == "system":
            instructions = text
        elif m["role"] == "user":
            out.append({"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": text}]})
        elif m["role"] == "assistant":
            n += 1
            out.append({"type": "reasoning", "id": f"rs_{n:04}", "summary": [],
                        "encrypted_content": "gAAAAAB" + "x" * 600})
            if text:
                out.append({"type": "message", "role": "assistant", "content": text})
            for c in m.get("tool_calls") or []:
                out.append({"type": "function_call", "call_id": c["id"],
                            "name": c["function"]["name"],
                            "arguments": c["function"]["arguments"]})
        elif m["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                        "output": text})
    return instructions, out
for n in (20, 500):
    instructions, input_items = items(messages[:n])
    for stream in (False, True):
        body = {"model": "gpt-5.5-codex", "instructions": instructions, "input": input_items,
                "tools": [{"type": "function", "name": "exec_command",
                           "description": "Runs a command in a PTY.", "strict": False,
                           "parameters": {"type": "object",
                                          "properties": {"cmd": {"type": "string"}},
                                          "required": ["cmd"]}}],
                "tool_choice": "auto", "parallel_tool_calls": True, "store": False,
                "stream": stream, "include": ["reasoning.encrypted_content"],
                "prompt_cache_key": "019a0000-bench-session"}
        name = f"{work}/responses-{n}-{'stream' if stream else 'plain'}.json"
        with open(name, "w") as f:
            json.dump(body, f, ensure_ascii=False, separators=(",", ":"))
EOF
# Messages: the same transcript's first 20 messages with its short system prompt; and the
# agent-sized body, 200 messages of the same generator as Claude Code sends them (with more
# large tool results: 770 KB, 142k tokens). Both cut to end on the user's message: 19, 199.
GEN=(python3 benches/support/gen_claude_code_body.py)
"${GEN[@]}" --transcript "$WORK/transcript.json" --plain --messages 20 >"$WORK/messages-20-plain.json"
"${GEN[@]}" --transcript "$WORK/transcript.json" --plain --messages 20 --stream \
    >"$WORK/messages-20-stream.json"
"${GEN[@]}" --messages 200 >"$WORK/messages-200-plain.json"
"${GEN[@]}" --messages 200 --stream >"$WORK/messages-200-stream.json"

UP_PORT=$(free_port)
"$FAKE" "127.0.0.1:$UP_PORT" 2>"$WORK/upstream.log" &
PIDS+=($!)
wait_for "$UP_PORT"

# `serve` (default policy) on port $1 in front of the fake upstream for both providers,
# with the flags after it; its pid in SERVE_PID.
start_serve() {
    local port=$1
    shift
    OPENAI_BASE_URL="http://127.0.0.1:$UP_PORT/v1" OPENAI_API_KEY=sk-bench \
        ANTHROPIC_BASE_URL="http://127.0.0.1:$UP_PORT" ANTHROPIC_API_KEY=sk-ant-bench \
        "$BIN" serve --listen "127.0.0.1:$port" "$@" 2>>"$WORK/serve.log" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    wait_for "$port"
}

PROXY_PORT=$(free_port)
EXPORT=()
if [ -n "${OTLP:-}" ]; then
    EXPORT=(--otlp-endpoint "http://127.0.0.1:$UP_PORT")
fi
start_serve "$PROXY_PORT" "${EXPORT[@]}"

# The headers a route's client sends with the body: Claude Code's on Messages (its session
# id is its conversation id, the proxy's session key; its key, which the proxy replaces).
headers_of() {
    HEADERS=(-H "content-type: application/json")
    if [ "$1" = messages ]; then
        HEADERS+=(
            -H "anthropic-version: 2023-06-01"
            -H "anthropic-beta: claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
            -H "x-app: cli"
            -H "user-agent: claude-cli/2.0.14 (external, cli)"
            -H "x-claude-code-session-id: 5f0c7c2e-3c1e-4d7a-9b7e-1f3a2c4d5e6f"
            -H "x-api-key: sk-ant-client"
        )
    fi
}

path_of() {
    case $1 in
    chat) echo /v1/chat/completions ;;
    messages) echo /v1/messages ;;
    responses) echo /v1/responses ;;
    esac
}

# One oha run on route $2 of the server at $1 with body $3 (more oha flags after); its
# JSON summary on stdout.
load() {
    local url=$1 route=$2 body=$3
    shift 3
    headers_of "$route"
    "$OHA" --no-tui --output-format json -m POST "${HEADERS[@]}" -D "$body" "$@" \
        "$url$(path_of "$route")"
}

# The proxy's phase sums and counts from its /metrics, every route together, as JSON.
phases() {
    python3 - "$PROXY_PORT" <<'EOF'
import json, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
out = {}
for line in text.splitlines():
    for phase in ("request", "preparation", "upstream"):
        for part in ("sum", "count"):
            prefix = f"llm_context_{phase}_duration_seconds_{part}"
            if line.startswith(prefix + "{") or line.startswith(prefix + " "):
                key = f"{phase}_{part}"
                out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
print(json.dumps(out))
EOF
}

# CASES="responses 20,responses 500" runs only those (comma-separated).
if [ -n "${CASES:-}" ]; then
    IFS=, read -r -a CASES <<<"$CASES"
else
    CASES=("chat 20" "chat 500" "messages 20" "messages 200" "responses 20" "responses 500")
fi
: >"$WORK/did.md"
: >"$WORK/phases.md"

echo "| route | messages | body | mode | direct p50 | direct p99 | proxy p50 | proxy p99 | added p50 | added p99 | proxy req/s (-c 64) | errors |"
echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for c in "${CASES[@]}"; do
    read -r route n <<<"$c"
    for mode in plain stream; do
        body="$WORK/$route-$n-$mode.json"
        # What serve did to this body: the report headers of one answer.
        headers_of "$route"
        curl -s -o /dev/null -D "$WORK/headers.txt" -X POST "${HEADERS[@]}" \
            --data-binary "@$body" "http://127.0.0.1:$PROXY_PORT$(path_of "$route")"
        # Warm both paths (connections, the proxy's session memory) before measuring.
        load "http://127.0.0.1:$UP_PORT" "$route" "$body" -n 200 -c 1 >/dev/null
        load "http://127.0.0.1:$PROXY_PORT" "$route" "$body" -n 200 -c 1 >/dev/null
        load "http://127.0.0.1:$UP_PORT" "$route" "$body" -n "$REQUESTS" -c 1 >"$WORK/direct.json"
        phases >"$WORK/phases-before.json"
        load "http://127.0.0.1:$PROXY_PORT" "$route" "$body" -n "$REQUESTS" -c 1 >"$WORK/proxy.json"
        phases >"$WORK/phases-after.json"
        load "http://127.0.0.1:$PROXY_PORT" "$route" "$body" -z "$DURATION" -c 64 >"$WORK/load.json"
        python3 - "$WORK" "$route" "$mode" "$body" <<'EOF'
import json, os, sys
work, route, mode, body = sys.argv[1:]
def read(name):
    return json.load(open(f"{work}/{name}.json"))
direct, proxy, load = read("direct"), read("proxy"), read("load")
parsed = json.load(open(body, encoding="utf-8"))
n = len(parsed.get("messages") or parsed.get("input"))
def ms(run, p):
    return run["latencyPercentiles"][p] * 1e3
def errors(run):
    codes = run.get("statusCodeDistribution", {})
    bad = sum(v for k, v in codes.items() if k != "200")
    # A timed run ends with its connections' last requests cut short: not failures.
    cut = {"aborted due to deadline"}
    return bad + sum(v for k, v in run.get("errorDistribution", {}).items() if k not in cut)
cells = [ms(direct, "p50"), ms(direct, "p99"), ms(proxy, "p50"), ms(proxy, "p99"),
         ms(proxy, "p50") - ms(direct, "p50"), ms(proxy, "p99") - ms(direct, "p99")]
label = f"| {route} | {n} | {os.path.getsize(body) / 1024:,.0f} KiB | {mode} | "
print(label + " | ".join(f"{c:.3f} ms" for c in cells)
      + f" | {load['summary']['requestsPerSec']:,.0f} | {errors(direct) + errors(proxy) + errors(load)} |")

# What serve did: the report headers of one answer.
lines = open(f"{work}/headers.txt", encoding="latin-1").read().splitlines()
status = lines[0].split()[1]
headers = {}
for line in lines[1:]:
    if ":" in line:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
def h(name):
    return headers.get(f"x-llm-context-{name}", "–")
with open(f"{work}/did.md", "a") as f:
    f.write(label + f"{status} | {h('before-tokens')} | {h('after-tokens')} | "
            f"{h('removed-messages')} | {h('cleared')} | {h('offloaded')} | {h('memo')} |\n")

# Where the proxy's time went over the -c 1 run through it: the means of its phases.
before, after = read("phases-before"), read("phases-after")
def mean(phase):
    count = after.get(f"{phase}_count", 0) - before.get(f"{phase}_count", 0)
    total = after.get(f"{phase}_sum", 0) - before.get(f"{phase}_sum", 0)
    return f"{total / count * 1e3:.3f} ms" if count else "–"
with open(f"{work}/phases.md", "a") as f:
    f.write(label + f"{proxy['summary']['average'] * 1e3:.3f} ms | {mean('request')} | "
            f"{mean('preparation')} | {mean('upstream')} |\n")
EOF
    done
done

echo
echo "What serve did to each body (the x-llm-context-* headers of one answer; default policy):"
echo
echo "| route | messages | body | mode | status | before tokens | after tokens | removed messages | cleared | offloaded | memo |"
echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"
cat "$WORK/did.md"

echo
echo "Where the time went through the proxy, means over its -c 1 run: the client's, then from"
echo "serve's /metrics the time to the answer's headers and its two parts (serve's own work:"
echo "reading, preparing, writing the upstream's body; and waiting on the upstream):"
echo
echo "| route | messages | body | mode | client mean | to headers | preparation | upstream |"
echo "|---|---:|---:|---|---:|---:|---:|---:|"
cat "$WORK/phases.md"

# Memory per request in flight at the agent-sized body: a fresh `serve` for each row (VmHWM
# is the high-water mark since the process started), its idle RSS after a small warm-up,
# then the requests all at once, each held 1 s by the upstream (the fake waits when a
# request asks by header, which the proxy passes on, as a model takes seconds to answer),
# and its VmHWM after: (peak − idle) / requests in flight, against the body's size.
stop_serve() {
    kill "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
    local kept=()
    for pid in "${PIDS[@]}"; do
        [ "$pid" = "$SERVE_PID" ] || kept+=("$pid")
    done
    PIDS=("${kept[@]}")
}
vm_kib() {
    awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status"
}
echo
echo "Peak memory per request in flight, the agent-sized Messages body (a fresh serve each"
echo "row; the upstream holds each request 1 s, so that all are in flight together):"
echo
: >"$WORK/memory.txt"
echo "| mode | in flight | body | idle RSS | peak RSS | per request in flight | × the body | wall time | errors |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for mode in plain stream; do
    for inflight in 1 "$MEM_INFLIGHT"; do
        body="$WORK/messages-200-$mode.json"
        port=$(free_port)
        start_serve "$port"
        load "http://127.0.0.1:$port" messages "$WORK/messages-20-$mode.json" -n 50 -c 2 >/dev/null
        sleep 0.5
        idle=$(vm_kib "$SERVE_PID" VmRSS)
        load "http://127.0.0.1:$port" messages "$body" -n "$inflight" -c "$inflight" \
            -H "x-fake-upstream-delay-ms: 1000" >"$WORK/mem.json"
        peak=$(vm_kib "$SERVE_PID" VmHWM)
        stop_serve
        python3 - "$WORK" "$mode" "$inflight" "$body" "$idle" "$peak" <<'EOF'
import json, os, sys
work, mode, inflight, body, idle, peak = sys.argv[1:]
inflight, size = int(inflight), os.path.getsize(body)
idle, peak = int(idle) * 1024, int(peak) * 1024
run = json.load(open(f"{work}/mem.json"))
bad = sum(v for k, v in run.get("statusCodeDistribution", {}).items() if k != "200")
bad += sum(run.get("errorDistribution", {}).values())
per = (peak - idle) / inflight
mib = 2**20
print(f"| {mode} | {inflight} | {size / 1024:,.0f} KiB | {idle / mib:.1f} MiB | "
      f"{peak / mib:.1f} MiB | {per / mib:.2f} MiB | **{per / size:.1f}×** | "
      f"{run['summary']['total']:.2f} s | {bad} |")
with open(f"{work}/memory.txt", "a") as f:
    f.write(f"peak memory per request in flight: {per / size:.1f}× the body "
            f"({mode}, {inflight} at once)\n")
EOF
    done
done
echo
cat "$WORK/memory.txt"
