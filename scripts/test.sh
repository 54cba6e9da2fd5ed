#!/usr/bin/env bash
# The test command: every test of the workspace, with every feature.
# Usage: bash scripts/test.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-features "$@"
