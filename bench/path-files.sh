#!/usr/bin/env bash
# The source files of ours a forwarded tools/call executes code in, read off the callgrind runs
# that bench/callgrind.sh leaves in target/callgrind ($ERA-1.out and $ERA-$N.out): a file is on
# the request path when its instructions grow with the number of requests (at least
# CG_MIN instructions per request, default 5). Inlined code counts for the file it was written
# in (callgrind follows the line tables). Prints the count per crate and the list.
#
#   CG_N=1000 bench/callgrind.sh && bench/path-files.sh            # both eras
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${CG_OUT:-$ROOT/target/callgrind}
N=${CG_N:-2000}
MIN=${CG_MIN:-5}

per_file() {
  python3 "$ROOT/bench/cg_files.py" "$1" |
    sed -n 's#^.*/crates/\(wire\|upstream\|core\|http\|store\|policy\|switchboard\)/src/#crates/\1/src/#p'
}

for era in legacy modern; do
  one="$OUT/$era-1.out" many="$OUT/$era-$N.out"
  [ -f "$one" ] && [ -f "$many" ] || { echo "run CG_N=$N bench/callgrind.sh first" >&2; exit 1; }
  join -a2 -e0 -o 0,1.2,2.2 <(per_file "$one" | sort) <(per_file "$many" | sort) |
    awk -v n="$N" -v min="$MIN" '{ d = ($3 - $2) / (n - 1); if (d >= min) printf "%s %d\n", $1, d }' |
    sort >"$OUT/$era-path.txt"
  total=$(wc -l <"$OUT/$era-path.txt")
  echo "== $era: $total files of ours per forwarded tools/call (>= $MIN Ir/request each)"
  awk '{ split($1, p, "/"); c[p[2]]++ } END { for (k in c) printf "   %s %d\n", k, c[k] }' "$OUT/$era-path.txt" | sort
  sed 's/^/   /' "$OUT/$era-path.txt"
done
