#!/usr/bin/env bash
# Runs every fuzz target over its committed corpus: RUNS executions each (10^7 by default),
# inputs up to 4 KiB, and keeps what it finds new in the corpus (`cargo fuzz cmin` before a
# commit keeps it small). Needs cargo-fuzz and a nightly toolchain (or RUSTC_BOOTSTRAP=1).
# A crash stops the run with the input under fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"
runs=${RUNS:-10000000}
toolchain=${TOOLCHAIN:-+nightly}
for target in decode token godot_call; do
  mkdir -p "corpus/$target"
  start=$(date +%s)
  cargo "$toolchain" fuzz run -O "$target" "corpus/$target" -- \
    -runs="$runs" -max_len=4096 -print_final_stats=1 2>&1 | grep -E "^(Done|stat::(number_of_executed_units|average_exec_per_sec|new_units_added))"
  echo "$target: $runs executions in $(( $(date +%s) - start )) s, no crash"
done
