#!/usr/bin/env bash
# Guardrails' cost in instructions per forwarded request (callgrind, as bench/callgrind.sh),
# side by side with guardrails off: (a) configured but covering no tool of the request, (b)
# the built-in secrets scanner on 4 KiB and 1 MiB results. The results are the fixture's
# `leak` tool with `kind: filler` (plain text that matches nothing).
#
#   bench/guardrails.sh            # release build, N=2000 per row (CG_N to change)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
for size in 4096 1048576; do
  args="--tool leak --args {\"kind\":\"filler\",\"bytes\":$size}"
  echo "### results of $size bytes"
  for cfg in off nomatch secrets; do
    gw=""
    [ "$cfg" = off ] || gw="--guardrails $ROOT/bench/guardrails/$cfg.yaml"
    echo "#### guardrails: $cfg"
    CG_GW_ARGS="$gw" CG_BENCH_ARGS="$args" bench/callgrind.sh | tail -n 2
  done
done
