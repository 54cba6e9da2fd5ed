#!/usr/bin/env bash
# The proxy's load benchmark: what `llm-context serve` adds to a call, and how many calls
# a second it serves, at 20 and 500 messages per request, streamed and not.
#
#   bash benches/serve.sh            # figures as a Markdown table on stdout
#
# What it does:
# - installs the load generator oha (pinned, with `cargo install --locked`, into a cache
#   directory outside the repository) where it is missing;
# - builds `llm-context` and the fake upstream (`examples/fake_upstream.rs`) in release;
# - makes the request bodies from the project's seeded transcript generator
#   (benches/support/gen_transcript.py --seed 1: JSON, logs, code, non-ASCII; the
#   first 20 and 500 messages of one agent transcript);
# - starts the fake upstream and `serve` in front of it on 127.0.0.1, and for each case
#   measures latency one request at a time (`-c 1`) against the upstream directly and
#   through the proxy (added = through − direct, at p50 and p99), then throughput
#   through the proxy with many connections (`-c 64` for 10 s);
# - stops both servers by their pids whatever happens.
#
# Environment: OHA (a path to an oha binary, to skip the install), REQUESTS (latency
# samples per case, default 2000), DURATION (throughput run, default 10s), OTLP=1 (build
# with the `otel` feature and run `serve --otlp-endpoint` against the fake upstream, which
# also accepts OTLP/HTTP: what exporting every request's spans costs; without it, the
# same binary exports nothing).
set -euo pipefail

cd "$(dirname "$0")/.."

OHA_VERSION=1.16.0
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llm-context-bench"
REQUESTS="${REQUESTS:-2000}"
DURATION="${DURATION:-10s}"

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
        name = f"{work}/body-{n}-{'stream' if stream else 'plain'}.json"
        with open(name, "w") as f:
            json.dump(body, f, ensure_ascii=False, separators=(",", ":"))
EOF

UP_PORT=$(free_port)
"$FAKE" "127.0.0.1:$UP_PORT" 2>"$WORK/upstream.log" &
PIDS+=($!)
wait_for "$UP_PORT"

PROXY_PORT=$(free_port)
EXPORT=()
if [ -n "${OTLP:-}" ]; then
    EXPORT=(--otlp-endpoint "http://127.0.0.1:$UP_PORT")
fi
OPENAI_BASE_URL="http://127.0.0.1:$UP_PORT/v1" OPENAI_API_KEY=sk-bench \
    "$BIN" serve --listen "127.0.0.1:$PROXY_PORT" "${EXPORT[@]}" 2>"$WORK/serve.log" &
PIDS+=($!)
wait_for "$PROXY_PORT"

# One oha run; its JSON summary on stdout.
load() {
    local url=$1 body=$2
    shift 2
    "$OHA" --no-tui --output-format json -m POST -H "content-type: application/json" \
        -D "$body" "$@" "$url/v1/chat/completions"
}

echo "| messages | body | mode | direct p50 | direct p99 | proxy p50 | proxy p99 | added p50 | added p99 | proxy req/s (-c 64) | errors |"
echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in 20 500; do
    for mode in plain stream; do
        body="$WORK/body-$n-$mode.json"
        # Warm both paths (connections, the proxy's session memory) before measuring.
        load "http://127.0.0.1:$UP_PORT" "$body" -n 200 -c 1 >/dev/null
        load "http://127.0.0.1:$PROXY_PORT" "$body" -n 200 -c 1 >/dev/null
        load "http://127.0.0.1:$UP_PORT" "$body" -n "$REQUESTS" -c 1 >"$WORK/direct.json"
        load "http://127.0.0.1:$PROXY_PORT" "$body" -n "$REQUESTS" -c 1 >"$WORK/proxy.json"
        load "http://127.0.0.1:$PROXY_PORT" "$body" -z "$DURATION" -c 64 >"$WORK/load.json"
        python3 - "$WORK" "$n" "$mode" "$(wc -c <"$body")" <<'EOF'
import json, sys
work, n, mode, size = sys.argv[1:]
def read(name):
    return json.load(open(f"{work}/{name}.json"))
direct, proxy, load = read("direct"), read("proxy"), read("load")
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
kb = int(size) / 1024
print(f"| {n} | {kb:,.0f} KiB | {mode} | " + " | ".join(f"{c:.3f} ms" for c in cells)
      + f" | {load['summary']['requestsPerSec']:,.0f} | {errors(direct) + errors(proxy) + errors(load)} |")
EOF
    done
done
