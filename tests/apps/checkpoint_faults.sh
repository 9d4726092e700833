#!/usr/bin/env bash
# Damaged or mismatched checkpoints are refused with a clear error, never
# loaded silently (docs/reliability.md):
#  - an edited manifest (its step, its applied steps) fails zckpt verify and
#    --resume PATH naming manifest.json; --resume auto passes over it; a
#    version-1 manifest (no checksum of its own) resumes with a warning.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > c.json <<'JSON'
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
 "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 64},
 "checkpoint": {"dir": "ck", "interval": 2},
 "train": {"steps": 4, "eval_interval": 0}}
JSON
run_np 2 c.json --log-dir base
[ "$RC" = 0 ] && [ -d ck/step_2 ] && [ -d ck/step_4 ] || fail "base run: exit $RC"
cp -r ck pristine

# The manifest's own checksum.
for key in step applied_steps; do
  rm -rf ck && cp -r pristine ck
  sed -i "s/\"$key\": 4/\"$key\": 80/" ck/step_4/manifest.json
  grep -q "\"$key\": 80" ck/step_4/manifest.json || fail "could not edit $key"
  if [ -n "${ZCKPT:-}" ]; then
    set +e; "$ZCKPT" verify ck/step_4 > v.out 2>&1; vrc=$?; set -e
    [ "$vrc" = 1 ] && grep -q "ck/step_4/manifest.json: the manifest's own SHA-256 does not match" v.out \
      && echo "ok: zckpt verify refuses a manifest whose $key was edited" || fail "verify edited $key: exit $vrc, $(cat v.out)"
  fi
  run_np 2 c.json --log-dir r --resume ck/step_4 --steps 6
  [ "$RC" = 2 ] && grep -q "ck/step_4/manifest.json: the manifest's own SHA-256 does not match" "$WORK/out" \
    && echo "ok: --resume PATH refuses a manifest whose $key was edited" || fail "resume edited $key: exit $RC"
done
run_np 2 c.json --log-dir r --resume auto --steps 3
[ "$RC" = 0 ] && grep -q "skipping ck/step_4: .*manifest.json: the manifest's own SHA-256" "$WORK/out" \
  && grep -q "resumed from ck/step_2 at step 2" "$WORK/out" && echo "ok: --resume auto passes over an edited manifest" \
  || fail "resume auto past an edited manifest: exit $RC"
# A version-1 manifest (before the checksum): accepted with a warning.
rm -rf ck && cp -r pristine ck
python3 - ck/step_4/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); del m["manifest_sha256"]; m["version"] = 1
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
run_np 2 c.json --log-dir r --resume ck/step_4 --steps 6
[ "$RC" = 0 ] && grep -q "warning: ck/step_4/manifest.json: checkpoint version 1" "$WORK/out" \
  && grep -q "resumed from ck/step_4 at step 4" "$WORK/out" && echo "ok: a version-1 manifest resumes with a warning" \
  || fail "version-1 manifest: exit $RC"
finish
