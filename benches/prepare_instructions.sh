#!/usr/bin/env bash
# What one warm call of the prepare benchmark costs in instructions and L1 data misses,
# counted by valgrind's callgrind rather than timed: a shared machine moves the medians
# of `benches/prepare.rs` by up to 2x within minutes, and these counts do not move.
#
#   bash benches/prepare_instructions.sh          # loose, then the floor (estimate_only)
#   bash benches/prepare_instructions.sh tight    # any case of benches/prepare.rs
#
# What it does:
# - builds the prepare benchmark (release) and finds its binary;
# - runs the case under `valgrind --tool=callgrind --cache-sim=yes` twice, with 5 and
#   with 25 samples (both sizes, 1,000 and 10,000 messages, on the seeded generated
#   transcripts the benchmark uses);
# - prints, for the function that prepares a request (or, for the floor, the one that
#   estimates it), the difference of the two runs' inclusive counts divided by 20: one
#   warm call of each size, together. Making the inputs, the first (cold) call and the
#   process's start are the same in both runs and cancel out.
#
# Environment: BIN, a prepare benchmark binary built before (another commit's, to compare
# two builds), instead of building this tree's.
#
# Needs valgrind (with callgrind_annotate) and Python 3 on the PATH. The simulated L1 is
# the host's; callgrind's last-level cache is not, so only L1 misses are printed.
set -euo pipefail

cd "$(dirname "$0")/.."

for tool in valgrind callgrind_annotate python3; do
  command -v "$tool" > /dev/null || { echo "prepare_instructions: $tool is not on the PATH" >&2; exit 2; }
done

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(loose estimate_only)

bin=${BIN:-}
[ -n "$bin" ] || bin=$(cargo bench --bench prepare --no-run --message-format json 2> /dev/null \
  | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "prepare" and m.get("executable"):
        print(m["executable"])')
[ -n "$bin" ] || { echo "prepare_instructions: the prepare benchmark did not build" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for case in "${cases[@]}"; do
  case "$case" in
    agent_loop_*)
      # Their inputs are made by calling the service for every earlier turn.
      echo "prepare_instructions: $case makes its inputs with the service itself; time it instead" >&2
      exit 2 ;;
    estimate_only | ascii_estimate_only*) functions='llm_context_layers::tokens::estimate_message_tokens ' ;;
    # What the benchmark times: the call, and the response future polled to its end.
    *) functions='ContextPolicyService<S,P> as tower_service::Service|llm_context_layers::future::ResponseFuture<F> as core::future::future::Future>::poll' ;;
  esac
  for n in 5 25; do
    valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file="$out/$case.$n" \
      "$bin" --bench --sample-count "$n" "^prepare::$case(::|\$)" > "$out/$case.$n.txt" 2>&1
    grep -q "─ $case " "$out/$case.$n.txt" \
      || { echo "prepare_instructions: no case named $case in benches/prepare.rs" >&2; exit 2; }
  done
  python3 - "$out/$case" "$case" "$functions" <<'PY'
import re, subprocess, sys

prefix, case, functions = sys.argv[1:]

def counts(path):
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--show=Ir,D1mr", path],
        capture_output=True, text=True, check=True,
    ).stdout
    total = [0, 0]
    for function in functions.split("|"):
        # The outermost frame of each: the largest inclusive count among its lines.
        best = None
        for line in text.splitlines():
            if function in line:
                nums = [int(x.replace(",", "")) for x in re.findall(r"([\d,]+) \(", line)]
                if len(nums) >= 2 and (best is None or nums[0] > best[0]):
                    best = nums[:2]
        if best is None:
            sys.exit(f"prepare_instructions: {function.strip()} is not in the profile of {case}")
        total = [t + b for t, b in zip(total, best)]
    return total

few, many = counts(prefix + ".5"), counts(prefix + ".25")
ir, d1 = ((b - a) / 20 for a, b in zip(few, many))
print(f"{case:>16}: {ir / 1e6:6.2f} M instructions, {d1 / 1e3:6.1f} k L1 data misses"
      " a warm call (1,000 and 10,000 messages together)")
PY
done
