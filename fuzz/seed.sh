#!/usr/bin/env bash
# Seeds the decode corpus with the golden frame of every message kind, so the fuzzer starts
# from valid frames instead of searching for the magic. Then: `RUSTC_BOOTSTRAP=1 cargo fuzz run
# decode corpus/decode -- -max_total_time=600`.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p corpus/decode
while read -r name hex; do
  printf '%s' "$hex" | xxd -r -p > "corpus/decode/$name"
done < ../crates/horizon-proto/tests/golden.txt
echo "seeded $(ls corpus/decode | wc -l) frames into fuzz/corpus/decode"
