#!/usr/bin/env bash
# Builds the layer probes of tests/layers/CMakeLists.txt: every upward include
# fails to compile for want of the header, every control compiles; and no
# source reaches another layer through a relative "../" include, which the
# include path could not stop.
set -u
fails=0
build() { cmake --build "$BUILD" --target "$1" 2>&1; }
for p in $BAD; do
  IFS=: read -r probe target header <<<"$p"
  if out=$(build "$probe"); then
    echo "FAIL: $target compiled an include of $header"
    fails=$((fails + 1))
  elif grep -q -e "$header: No such file or directory" -e "'$header' file not found" <<<"$out"; then  # gcc, clang
    echo "ok: $target cannot include $header"
  else
    echo "FAIL: $target including $header failed for another reason:"
    tail -5 <<<"$out"
    fails=$((fails + 1))
  fi
done
for p in $GOOD; do
  IFS=: read -r probe target header <<<"$p"
  if out=$(build "$probe"); then
    echo "ok: $target includes $header"
  else
    echo "FAIL: $target cannot include $header (control):"
    tail -5 <<<"$out"
    fails=$((fails + 1))
  fi
done
if rel=$(grep -rn --include='*.cpp' --include='*.hpp' --include='*.cu' --include='*.cuh' '#include "\.\./' \
    "$SRC/src" "$SRC/modules" "$SRC/apps"); then
  echo "FAIL: relative includes across folders:"
  echo "$rel"
  fails=$((fails + 1))
else
  echo "ok: no relative includes across folders"
fi
[ "$fails" = 0 ] && echo "all checks passed" || { echo "$fails check(s) failed"; exit 1; }
