#!/usr/bin/env bash
# Runs every test of the workspace against a real redis-server, on a fresh machine too:
# installs redis-server where it is missing, starts it on 127.0.0.1 on a free port, runs
# `cargo test --workspace --all-features` (extra arguments are passed on) and stops the
# server by its pid whatever happens. Exits with cargo's status.
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
exit "$status"
