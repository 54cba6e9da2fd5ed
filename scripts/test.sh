#!/usr/bin/env bash
# Runs every test of the workspace against a real redis-server, on a fresh machine too:
# installs redis-server where it is missing, starts it on 127.0.0.1 on a free port, runs
# `cargo test --workspace --all-features` (extra arguments are passed on) and stops the
# server by its pid whatever happens; then the official OpenAI and Anthropic Python SDKs
# against `llm-context serve` (tests/sdk, pinned, in a venv outside the repository), and
# Claude Code and the Codex CLI (tests/agents, pinned, installed with npm outside the
# repository), and the
# OpenAI Agents SDK, the Vercel AI SDK, LangChain and pydantic-ai (tests/agents, pinned, in
# a venv and an npm prefix outside the repository), and the ledger's page in Chromium
# (installed where it is missing). Exits with the first failure's status.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    echo "test.sh: installing redis-server" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends redis-server
fi

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
REDIS_LOG=$(mktemp -t redis-test.XXXXXX.log)

redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --daemonize no \
    >"$REDIS_LOG" 2>&1 &
REDIS_PID=$!

stop_redis() {
    if kill -0 "$REDIS_PID" 2>/dev/null; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -f "$REDIS_LOG"
}
trap stop_redis EXIT

ready=""
for _ in $(seq 100); do
    if redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG; then
        ready=yes
        break
    fi
    if ! kill -0 "$REDIS_PID" 2>/dev/null; then
        break
    fi
    sleep 0.05
done
if [ -z "$ready" ]; then
    echo "test.sh: redis-server did not start on port $PORT:" >&2
    cat "$REDIS_LOG" >&2
    exit 1
fi

export REDIS_URL="redis://127.0.0.1:$PORT/"
echo "test.sh: redis-server $(redis-server --version | awk '{print $3}') on $REDIS_URL (pid $REDIS_PID)" >&2

status=0
cargo test --workspace --all-features "$@" || status=$?
# A filtered run (extra arguments) stops here: it may not have built the binary.
if [ "$status" -ne 0 ] || [ "$#" -gt 0 ]; then
    exit "$status"
fi

# The official OpenAI and Anthropic Python SDKs against `llm-context serve` (the binary
# the tests just built), in a venv outside the repository, at pinned versions.
SDK_VENV="${XDG_CACHE_HOME:-$HOME/.cache}/llm-context-tests/sdk-venv"
OPENAI_SDK_VERSION=3.57.0
ANTHROPIC_SDK_VERSION=2.16.0
if ! "$SDK_VENV/bin/python" -c "import openai, anthropic, sys; sys.exit(openai.__version__ != '$OPENAI_SDK_VERSION' or anthropic.__version__ != '$ANTHROPIC_SDK_VERSION')" 2>/dev/null; then
    echo "test.sh: installing openai==$OPENAI_SDK_VERSION anthropic==$ANTHROPIC_SDK_VERSION into $SDK_VENV" >&2
    if ! python3 -m venv "$SDK_VENV" 2>/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends python3-venv
        python3 -m venv "$SDK_VENV"
    fi
    "$SDK_VENV/bin/pip" install -q "openai==$OPENAI_SDK_VERSION" "anthropic==$ANTHROPIC_SDK_VERSION"
fi
LLM_CONTEXT_BIN="${CARGO_TARGET_DIR:-$(pwd)/target}/debug/llm-context" \
    "$SDK_VENV/bin/python" -m unittest tests/sdk/test_openai_sdk.py tests/sdk/test_anthropic_sdk.py || status=$?

# Claude Code itself (npm, pinned, outside the repository), its tool loop run through
# `llm-context serve` and directly against recording fakes on 127.0.0.1 (tests/agents).
AGENTS_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/llm-context-tests/agents"
CLAUDE_CODE_VERSION=2.1.332
CLAUDE_CODE_BIN="$AGENTS_DIR/node_modules/.bin/claude"
if ! "$CLAUDE_CODE_BIN" --version 2>/dev/null | grep -q "^$CLAUDE_CODE_VERSION "; then
    echo "test.sh: installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into $AGENTS_DIR" >&2
    mkdir -p "$AGENTS_DIR"
    npm install --prefix "$AGENTS_DIR" --no-audit --no-fund --loglevel=error \
        "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"
fi
CLAUDE_CODE_BIN="$CLAUDE_CODE_BIN" \
    LLM_CONTEXT_BIN="${CARGO_TARGET_DIR:-$(pwd)/target}/debug/llm-context" \
    ENFORCING_UPSTREAM_BIN="${CARGO_TARGET_DIR:-$(pwd)/target}/debug/examples/enforcing_upstream" \
    python3 -m unittest tests/agents/test_claude_code.py || status=$?

# The Codex CLI (npm, pinned, outside the repository; its npm package ships a native
# binary), whose only wire is the Responses API: its tool loop through `llm-context serve`
# and directly against a recording fake on 127.0.0.1, and a long output offloaded and read
# inside (tests/agents/test_codex.py).
CODEX_VERSION=0.171.0
CODEX_BIN="$AGENTS_DIR/node_modules/.bin/codex"
if ! "$CODEX_BIN" --version 2>/dev/null | grep -q " $CODEX_VERSION\$"; then
    echo "test.sh: installing @openai/codex@$CODEX_VERSION into $AGENTS_DIR" >&2
    mkdir -p "$AGENTS_DIR"
    npm install --prefix "$AGENTS_DIR" --no-audit --no-fund --loglevel=error \
        "@openai/codex@$CODEX_VERSION"
fi
CODEX_BIN="$CODEX_BIN" \
    LLM_CONTEXT_BIN="${CARGO_TARGET_DIR:-$(pwd)/target}/debug/llm-context" \
    python3 -m unittest tests/agents/test_codex.py || status=$?

# Agent frameworks (pinned, outside the repository), each one's two-round tool loop run
# through `llm-context serve` and directly against recording fakes on 127.0.0.1, streamed
# and not, over Chat Completions, the Responses API and Messages (tests/agents): the OpenAI
# Agents SDK (chat mode and its default `OpenAIResponsesModel`), LangChain (`ChatOpenAI`,
# with `use_responses_api` too, `ChatAnthropic`) and pydantic-ai (`OpenAIResponsesModel`
# too) in a venv, the Vercel AI SDK (`ai`, `@ai-sdk/openai`'s `.chat(model)` and default
# `openai(model)`, `@ai-sdk/anthropic`) with npm.
AGENTS_VENV="${XDG_CACHE_HOME:-$HOME/.cache}/llm-context-tests/agents-venv"
OPENAI_AGENTS_VERSION=0.24.0
LANGCHAIN_OPENAI_VERSION=1.8.1
LANGCHAIN_ANTHROPIC_VERSION=1.7.10
PYDANTIC_AI_VERSION=2.78.0
AGENTS_PINS="openai-agents==$OPENAI_AGENTS_VERSION langchain-openai==$LANGCHAIN_OPENAI_VERSION langchain-anthropic==$LANGCHAIN_ANTHROPIC_VERSION pydantic-ai-slim==$PYDANTIC_AI_VERSION"
if ! "$AGENTS_VENV/bin/python" -c "import sys; from importlib.metadata import version; sys.exit(any(version(n) != v for n, v in (p.split('==') for p in sys.argv[1:])))" $AGENTS_PINS 2>/dev/null; then
    echo "test.sh: installing $AGENTS_PINS into $AGENTS_VENV" >&2
    if ! python3 -m venv "$AGENTS_VENV" 2>/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends python3-venv
        python3 -m venv "$AGENTS_VENV"
    fi
    "$AGENTS_VENV/bin/pip" install -q "openai-agents==$OPENAI_AGENTS_VERSION" \
        "langchain-openai==$LANGCHAIN_OPENAI_VERSION" "langchain-anthropic==$LANGCHAIN_ANTHROPIC_VERSION" \
        "pydantic-ai-slim[openai,anthropic]==$PYDANTIC_AI_VERSION"
fi
AI_SDK_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/llm-context-tests/ai-sdk"
AI_SDK_VERSION=7.0.173
AI_SDK_OPENAI_VERSION=4.0.118
AI_SDK_ANTHROPIC_VERSION=4.0.105
AI_SDK_PINS="ai@$AI_SDK_VERSION @ai-sdk/openai@$AI_SDK_OPENAI_VERSION @ai-sdk/anthropic@$AI_SDK_ANTHROPIC_VERSION"
if ! AI_SDK_DIR="$AI_SDK_DIR" node -e 'for (const p of process.argv.slice(1)) { const at = p.lastIndexOf("@"); if (require(`${process.env.AI_SDK_DIR}/node_modules/${p.slice(0, at)}/package.json`).version !== p.slice(at + 1)) process.exit(1); }' $AI_SDK_PINS 2>/dev/null; then
    echo "test.sh: installing $AI_SDK_PINS into $AI_SDK_DIR" >&2
    mkdir -p "$AI_SDK_DIR"
    npm install --prefix "$AI_SDK_DIR" --no-audit --no-fund --loglevel=error --save-exact $AI_SDK_PINS
fi
AI_SDK_DIR="$AI_SDK_DIR" \
    LLM_CONTEXT_BIN="${CARGO_TARGET_DIR:-$(pwd)/target}/debug/llm-context" \
    "$AGENTS_VENV/bin/python" -m unittest tests/agents/test_openai_agents.py \
    tests/agents/test_ai_sdk.py tests/agents/test_langchain.py tests/agents/test_pydantic_ai.py \
    || status=$?

# The ledger's page in a real browser (tests/agents/test_ledger_page.py): Debian's chromium,
# installed where it is missing, loads /ui and a session's page headless; screenshots land
# under target/ui/.
if ! command -v chromium >/dev/null 2>&1; then
    echo "test.sh: installing chromium" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends chromium
fi
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(pwd)/target}" \
    LLM_CONTEXT_BIN="${CARGO_TARGET_DIR:-$(pwd)/target}/debug/llm-context" \
    python3 -m unittest tests/agents/test_ledger_page.py || status=$?
exit "$status"
