#!/bin/sh
# Runs one fuzz target with libFuzzer on the stable toolchain:
#   fuzz/run.sh TARGET [SECONDS] [libFuzzer flags...]
# The corpus is fuzz/corpus/TARGET (new inputs are added there); a failing
# input is written to fuzz/artifacts/TARGET/. SECONDS defaults to 600.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
target=$1
seconds=${2:-600}
shift
[ $# -gt 0 ] && shift
mkdir -p "$here/corpus/$target" "$here/artifacts/$target"
cd "$here/libfuzzer"
exec cargo fuzz run --sanitizer none --release --fuzz-dir . "$target" "$here/corpus/$target" -- \
    -max_total_time="$seconds" -artifact_prefix="$here/artifacts/$target/" \
    -print_final_stats=1 "$@"
