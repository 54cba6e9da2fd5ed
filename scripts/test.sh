#!/usr/bin/env bash
# The test command: every test of the workspace, with every feature, against a Redis
# started here on a free loopback port and stopped on exit.
# Usage: bash scripts/test.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends redis-server
fi

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
REDIS_DIR=$(mktemp -d)
redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --daemonize no \
    --dir "$REDIS_DIR" >"$REDIS_DIR/redis.log" 2>&1 &
REDIS_PID=$!
cleanup() {
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    rm -rf "$REDIS_DIR"
}
trap cleanup EXIT

for _ in $(seq 100); do
    if redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG; then
        break
    fi
    sleep 0.05
done
if ! redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG; then
    echo "redis-server did not start:" >&2
    cat "$REDIS_DIR/redis.log" >&2
    exit 1
fi
export REDIS_URL="redis://127.0.0.1:$PORT/"

cargo test --workspace --all-features "$@"
