#!/usr/bin/env python3
"""The full-size hostile-network cases against a running `llm-context serve` binary.

The test suite runs each case scaled down (tests/it/serve_limits.rs); this runs them at the
size the probe used and prints what it measured: whether slow and idle connections were
closed, whether /healthz kept answering (also with the connection cap full of idle
connections and the default header timeout), and the server's peak resident memory
(VmHWM) while keyless 60 MB bodies arrive.

    cargo build --release
    python3 scripts/hostile_serve.py target/release/llm-context
    python3 scripts/hostile_serve.py target/release/llm-context 256   # the server's ulimit -n
    # the big body the whole way, to a fake upstream:
    cargo run --release --example fake_upstream -- 127.0.0.1:9100 &
    OPENAI_BASE_URL=http://127.0.0.1:9100/v1 python3 scripts/hostile_serve.py target/release/llm-context
    # the same-format path, to any fake answering POST /v1/messages, and the memory per
    # request in flight for two shapes of body, one and four at once:
    ANTHROPIC_BASE_URL=http://127.0.0.1:9100 ANTHROPIC_API_KEY=sk-unused python3 scripts/hostile_serve.py target/release/llm-context

Standard library only. Linux (it reads /proc/PID/status). The server is started on a free
loopback port with a key table, a 5 s header timeout, and no upstream (none is needed).
"""

import hashlib
import resource
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def healthz(port, timeout=2.0):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def open_connections(port, n, send=b""):
    conns = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if send:
                s.sendall(send)
            conns.append(s)
        except OSError:
            break
    return conns


def answers(conns):
    """The status line each connection has been sent, or None."""
    out = []
    for s in conns:
        s.setblocking(False)
        try:
            out.append(s.recv(12).decode(errors="replace") or None)
        except OSError:
            out.append(None)
    return out


def still_open(conns):
    alive = 0
    for s in conns:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                continue
            alive += 1
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    exe = sys.argv[1]
    nofile = int(sys.argv[2]) if len(sys.argv) == 3 else None

    def limit():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "serve.toml")
        digest = hashlib.sha256(b"sk-probe").hexdigest()
        with open(config, "w") as f:
            f.write(f'listen = "127.0.0.1:{port}"\n[limits]\nheader_timeout = 5\n')
            f.write(f'[[keys]]\nsha256 = "{digest}"\norg = "probe"\n')
        env = dict(os.environ, RUST_LOG="error")
        env.setdefault("OPENAI_API_KEY", "sk-unused")
        server = subprocess.Popen([exe, "serve", "--config", config], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  preexec_fn=limit)
        try:
            for _ in range(200):
                if healthz(port):
                    break
                time.sleep(0.05)
            else:
                sys.exit("the server did not start")
            run(server.pid, port)
        finally:
            server.terminate()
            server.wait(timeout=30)
    at_the_cap(exe)
    if os.environ.get("ANTHROPIC_BASE_URL"):
        memory_shapes(exe)


def at_the_cap(exe):
    """The connection cap full of idle connections, with the default header timeout
    (30 s, which would hold each place that long): `ulimit -n 256` caps the server at 192
    connections; 276 are opened that send nothing, then a new connection asks for
    /healthz. The server sheds the connection idle longest for it."""
    port = free_port()
    env = dict(os.environ, RUST_LOG="error", OPENAI_API_KEY="sk-unused")

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    server = subprocess.Popen([exe, "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              preexec_fn=limit)
    try:
        for _ in range(200):
            if healthz(port):
                break
            time.sleep(0.05)
        else:
            sys.exit("the server did not start")
        idle = open_connections(port, 276)
        time.sleep(0.5)
        started = time.monotonic()
        answered = healthz(port, timeout=5)
        took = time.monotonic() - started
        print(f"at the cap (ulimit -n 256, header timeout 30 s, {len(idle)} idle connections): "
              f"/healthz {'answered in %.0f ms' % (took * 1e3) if answered else 'NOT answered within 5 s'}")
        for s in idle:
            s.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


def run(pid, port):
    # Slowloris: 300 connections sending their headers a byte at a time.
    slow = open_connections(port, 300, b"POST /v1/chat/completions HTTP/1.1\r\n")
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            for s in slow:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            time.sleep(0.5)

    threading.Thread(target=trickle, daemon=True).start()
    idle = open_connections(port, 100)
    bodies = open_connections(
        port, 100,
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-probe\r\n"
        b"Content-Length: 1000000\r\n\r\n{")
    print(f"opened {len(slow)} slowloris, {len(idle)} idle, {len(bodies)} slow-body connections")
    answered = healthz(port, timeout=10)
    print(f"/healthz during the flood: {'answered' if answered else 'NOT answered'}")
    time.sleep(15)
    stop.set()
    refused = answers(bodies)
    print(f"after 15 s: slowloris open {still_open(slow)}, idle open {still_open(idle)}, "
          f"slow bodies answered {sorted(set(a for a in refused if a))} "
          f"({sum(1 for a in refused if a)} of {len(bodies)})")
    for s in slow + idle + bodies:
        s.close()

    # Twelve keyless 60 MB bodies at once: refused from their headers.
    before = peak_rss_mb(pid)
    body = b"x" * (60 * 1024 * 1024)
    statuses = []

    def keyless():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body))
                try:
                    s.sendall(body)
                except OSError:
                    pass
                statuses.append(s.recv(12).decode(errors="replace"))
        except OSError as e:
            statuses.append(str(e))

    threads = [threading.Thread(target=keyless) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"12 keyless 60 MB bodies: {sorted(set(statuses))}; peak RSS {before:.0f} MB "
          f"before, {peak_rss_mb(pid):.0f} MB after")
    print(f"/healthz after: {'answered' if healthz(port) else 'NOT answered'}")

    # A keyed 60 MB Messages body (a long conversation, non-ASCII text with newlines): how
    # far the server's peak memory grows past the body while it reads and answers it.
    import json
    line = "Fehler: connexion refusée (接続拒否) bei db-7 — retry {}\n"
    text = "".join(line.format(i) for i in range(480))
    messages = []
    per = len(text.encode())
    while len(messages) * per < 60 * 1024 * 1024:
        role = "user" if len(messages) % 2 == 0 else "assistant"
        messages.append({"role": role, "content": [{"type": "text", "text": text}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": "Warum?"}]})
    # With ANTHROPIC_BASE_URL set (a fake Messages upstream), the body goes the whole way
    # as it came (the same-format path, which keeps the client's bytes); with
    # OPENAI_BASE_URL (examples/fake_upstream.rs), through the stack, translated; else it
    # is refused after reading.
    if os.environ.get("ANTHROPIC_BASE_URL"):
        model = "claude-sonnet-4-6"
    elif os.environ.get("OPENAI_BASE_URL"):
        model = "gpt-5.4"
    else:
        model = "claude-sonnet-4-6"
    big = json.dumps({"model": model, "max_tokens": 100,
                      "messages": messages}, ensure_ascii=False).encode()
    before = peak_rss_mb(pid)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-probe\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(big))
        s.sendall(big)
        status = s.recv(12).decode(errors="replace")
    after = peak_rss_mb(pid)
    print(f"one {len(big) / 2**20:.0f} MB Messages body: {status}; peak RSS {before:.0f} MB "
          f"before, {after:.0f} MB after ({(after - before) / (len(big) / 2**20):.1f}x the body)")


def memory_shapes(exe):
    """Peak memory per request in flight, for two shapes of a 60 MB Messages body (one
    huge message; 100,000 small ones), one request and four at once, sent the whole way to
    a fake Messages upstream (ANTHROPIC_BASE_URL, examples/fake_upstream.rs) that answers
    each after 1 s, so that the four are in flight together. Each case starts a fresh
    server (default limits: a 256 MiB in-flight body budget) under a policy whose window
    holds the whole body (nothing is pruned: the worst case), and prints the statuses and
    the peak RSS over the idle server against the bodies it answered."""
    import json
    line = "Fehler: connexion refusée (接続拒否) bei db-7 — retry {}\n"
    size = 60 * 1024 * 1024

    def text_of(n):
        """About `n` bytes of log text (UTF-8)."""
        one = line.format(7)
        return one * (n // len(one.encode()))

    def huge():
        return [{"role": "user", "content": text_of(size)}]

    def small():
        text = text_of(size // 100_000)
        return [{"role": "user" if i % 2 == 0 else "assistant", "content": text}
                for i in range(100_000)] + [{"role": "user", "content": "Warum?"}]

    for name, messages in (("one huge message", huge()),
                           ("100,000 small messages", small())):
        body = json.dumps({"model": "claude-sonnet-4-6", "max_tokens": 100,
                           "messages": messages}, ensure_ascii=False).encode()
        for at_once in (1, 4):
            port = free_port()
            with tempfile.TemporaryDirectory() as tmp:
                policy = os.path.join(tmp, "policy.toml")
                with open(policy, "w") as f:
                    f.write("max_context_tokens = 100000000\n")
                env = dict(os.environ, RUST_LOG="error")
                env.setdefault("ANTHROPIC_API_KEY", "sk-unused")
                server = subprocess.Popen(
                    [exe, "serve", "--listen", f"127.0.0.1:{port}", "--policy", policy],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    for _ in range(200):
                        if healthz(port):
                            break
                        time.sleep(0.05)
                    idle = peak_rss_mb(server.pid)
                    statuses = []

                    def send():
                        with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
                            s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
                                      b"x-fake-upstream-delay-ms: 1000\r\n"
                                      b"Content-Type: application/json\r\n"
                                      b"Content-Length: %d\r\n\r\n" % len(body))
                            try:
                                s.sendall(body)
                            except OSError:
                                pass  # refused before it was all sent: the status says why
                            statuses.append(s.recv(12).decode(errors="replace")[9:12])

                    threads = [threading.Thread(target=send) for _ in range(at_once)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    peak = peak_rss_mb(server.pid) - idle
                    served = statuses.count("200") * len(body) / 2**20
                    ratio = f"{peak / served:.1f}x the bodies answered" if served else "-"
                    print(f"{name} ({len(body) / 2**20:.0f} MB), {at_once} at once: "
                          f"{sorted(statuses)}; peak RSS +{peak:.0f} MB over idle ({ratio})")
                finally:
                    server.terminate()
                    server.wait(timeout=30)


if __name__ == "__main__":
    main()
