#!/usr/bin/env bash
# The scaling driver's plots (jobs/scaling/run.py) from a tiny run: ranks 1
# and 2, ZeRO-0, weak and strong, 2 steps. Each of the four PNGs per model
# (tokens/s, efficiency, memory, communication) is written, decodes as an
# image with something drawn on it, and is referenced from the report by a
# path that resolves from the report's directory; --no-plots writes none, and
# a missing matplotlib would be a clear error before any run (checked through
# a Python that cannot import it).
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
"$ZDATA" markov --out data/markov >/dev/null
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import matplotlib' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "FAIL: no python3 with matplotlib (apt-get install python3-matplotlib)"; exit 1; }
driver=("$PY" "$SRC/jobs/scaling/run.py" --launcher "$MPIEXEC $MPI_FLAGS --bind-to none -np"
        --ztrain "$ZTRAIN" --config "$SRC/data/configs/tiny.json" --device cpu
        --ranks "1 2" --stages 0 --mode both --steps 2 --busbw-gbs 1)
set +e
"${driver[@]}" --out rep/scaling.md --plots rep/img --raw raw >"$WORK/out" 2>&1
RC=$?
set -e
[ "$RC" = 0 ] || fail "driver exited with $RC"
for what in tokens efficiency memory comm; do
  f=rep/img/tiny-$what.png
  if [ ! -s "$f" ]; then fail "$f not written"; continue; fi
  # Decodes; at least 400x250 pixels; more than 2% of them not background,
  # more than 8 distinct colours, and the first series' line drawn.
  if "$PY" - "$f" <<'PYEOF'
import sys
import matplotlib.image as mpimg
import numpy as np
img = mpimg.imread(sys.argv[1])[:, :, :3]
h, w = img.shape[:2]
drawn = np.mean(np.any(img < 0.95, axis=2))
colours = len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0))
# The first series' colour (matplotlib's C0, #1f77b4): a data line, not only axes.
line = int(np.sum(np.all(np.abs(img * 255 - [31, 119, 180]) < 24, axis=2)))
print(f"{sys.argv[1]}: {w}x{h}, {drawn:.1%} drawn, {colours} colours, {line} pixels of the first series")
sys.exit(0 if w >= 400 and h >= 250 and drawn > 0.02 and colours > 8 and line > 100 else 1)
PYEOF
  then echo "ok: $f is a plot"; else fail "$f is not a drawn image"; fi
  if grep -q "](img/tiny-$what.png)" rep/scaling.md; then echo "ok: the report shows $f"; else fail "report does not reference $f"; fi
done
# The efficiency plot's numbers are the report's: 1-rank runs are 1.00 by definition.
n=$(grep -c '| `tiny-n1-[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*| 1.00 |' rep/scaling.md || true)
if [ "$n" -ge 2 ]; then echo "ok: 1-rank rows have efficiency 1.00"; else fail "1-rank efficiency rows: $n"; fi

set +e
"${driver[@]}" --out rep2/scaling.md --raw raw2 --no-plots >"$WORK/out" 2>&1
RC=$?
set -e
if [ "$RC" = 0 ] && [ -s rep2/scaling.md ] && [ -z "$(find rep2 -name '*.png')" ] && ! grep -q '## Plots' rep2/scaling.md; then
  echo "ok: --no-plots writes no plot"
else
  fail "--no-plots: exit $RC or plots written"
fi

# Without matplotlib the driver says so before running anything.
mkdir -p nompl/matplotlib
echo 'raise ImportError("matplotlib hidden by the test")' > nompl/matplotlib/__init__.py
set +e
PYTHONPATH=$PWD/nompl "${driver[@]}" --out rep3/scaling.md --raw raw3 >"$WORK/out" 2>&1
RC=$?
set -e
if [ "$RC" = 2 ] && grep -q "the plots need matplotlib" "$WORK/out" && [ ! -e raw3/tiny-n1-p1v1-z0-m8a4 ]; then
  echo "ok: a missing matplotlib is an error before any run"
else
  fail "missing matplotlib: exit $RC"
fi
finish
