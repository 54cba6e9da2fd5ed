"""Codex's time to its answer, directly and through `llm-context serve`: `codex exec`
runs its two-round `exec_command` loop (tests/agents/test_codex.py's fake Responses
upstream on 127.0.0.1, which answers at once) five times each way; the medians of the
wall time, start to exit.

    CODEX_BIN=…/codex LLM_CONTEXT_BIN=target/release/llm-context python3 benches/codex_time.py

scripts/test.sh installs the pinned Codex CLI; build `llm-context` first.
"""

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "agents"))

import test_codex  # noqa: E402
from recording import Serve  # noqa: E402

RUNS = 5


def run(direct):
    upstream = test_codex.Responses("echo hallo")
    serve = None if direct else Serve(upstream)
    with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as home:
        try:
            start = time.monotonic()
            done, _ = test_codex.codex(upstream.url if direct else serve.url, work, home)
            took = time.monotonic() - start
        finally:
            if serve:
                serve.close()
            upstream.close()
    if done.returncode != 0:
        sys.exit(f"codex failed: {done.stderr.decode()[-2000:]}")
    return took


for direct in (True, False):
    runs = [run(direct) for _ in range(RUNS)]
    label = "direct" if direct else "through serve"
    print(f"{label}: median {statistics.median(runs):.3f} s over {RUNS} runs "
          f"({', '.join(f'{r:.2f}' for r in runs)})")
