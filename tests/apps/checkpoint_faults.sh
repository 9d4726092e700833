#!/usr/bin/env bash
# Damaged or mismatched checkpoints are refused with a clear error, never
# loaded silently (docs/reliability.md):
#  - an edited manifest (its step, its applied steps) fails zckpt verify and
#    --resume PATH naming manifest.json; --resume auto passes over it; a
#    version-1 manifest (no checksum of its own) resumes with a warning;
#  - --resume auto over checkpoints that are all damaged refuses (exit 2,
#    naming them) instead of starting from scratch; an uncommitted staging
#    dir alone is no checkpoint (a fresh start); past a damaged newest one it
#    resumes from the one before and moves the damaged one aside;
#  - zckpt export, logits and reshard refuse a checkpoint whose SHA-256s do
#    not match, naming the file;
#  - damage only Fletcher32 sees (the SHA-256 re-recorded) makes --resume
#    auto fall back like damage the SHA-256 sees;
#  - a checkpoint of another model whose units have the same element counts
#    (n_head; vocab_size and seq_len traded) is refused, naming the difference.
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

flip() {  # flip FILE: one byte in the middle
  local size; size=$(stat -c %s "$1")
  printf '\xff' | dd of="$1" bs=1 seek=$((size / 2)) count=1 conv=notrunc status=none
}
# Every checkpoint damaged: refuse, naming them.
rm -rf ck && cp -r pristine ck
flip ck/step_4/rank_00001.h5; flip ck/step_2/rank_00000.h5
run_np 2 c.json --log-dir alldamaged --resume auto --steps 6
[ "$RC" = 2 ] && grep -q "ztrain: error: --resume auto: every checkpoint under ck is damaged (ck/step_4, ck/step_2;" "$WORK/out" \
  && [ ! -e alldamaged/metrics.jsonl ] && echo "ok: --resume auto refuses when every checkpoint is damaged" || fail "all damaged: exit $RC"
# Only an interrupted save (staging dir): nothing was committed, a fresh start.
rm -rf ck && mkdir -p ck/step_2.tmp
run_np 2 c.json --log-dir r --resume auto --steps 2
[ "$RC" = 0 ] && grep -q "no checkpoint under ck; starting from scratch" "$WORK/out" && [ -d ck/step_2 ] \
  && echo "ok: a staging dir alone is no checkpoint: a fresh start" || fail "staging dir only: exit $RC"
# Past a damaged newest one: resumed from the one before, which reaches and saves its step again.
rm -rf ck && cp -r pristine ck
flip ck/step_4/rank_00001.h5
run_np 2 c.json --log-dir r --resume auto --steps 6
[ "$RC" = 0 ] && grep -q "resumed from ck/step_2 at step 2" "$WORK/out" && grep -q "ck/step_4 moved aside to ck/step_4.damaged" "$WORK/out" \
  && [ -d ck/step_4.damaged ] && [ "$(cat ck/latest)" = step_6 ] && [ -n "${ZCKPT:-}" ] && "$ZCKPT" verify ck/step_4 > /dev/null \
  && echo "ok: past a damaged checkpoint: resumed before it, moved aside, saved again" || fail "damaged newest: exit $RC, $(ls ck | tr '\n' ' ')"

# zckpt's readers verify the SHA-256s first.
if [ -n "${ZCKPT:-}" ]; then
  rm -rf ck && cp -r pristine ck
  flip ck/step_4/rank_00001.h5
  for cmd in "export ck/step_4 --out hf" "logits ck/step_4 --tokens 1,2,3 --out l.npy" "reshard ck/step_4 --out rs --dp 1"; do
    set +e; $ZCKPT $cmd > z.out 2>&1; zrc=$?; set -e
    [ "$zrc" = 1 ] && grep -q "checkpoint ck/step_4 does not verify: ck/step_4/rank_00001.h5: SHA-256 mismatch" z.out \
      && echo "ok: zckpt ${cmd%% *} refuses a damaged checkpoint" || fail "zckpt ${cmd%% *}: exit $zrc, $(cat z.out)"
  done
  [ ! -e hf/model.safetensors ] && [ ! -e l.npy ] || fail "a refused zckpt command wrote its output"
  # logits: the output may not be the reference it is compared with (it was
  # written first, so any logits matched), and --tolerance needs --expect.
  rm -rf ck && cp -r pristine ck
  "$ZCKPT" logits ck/step_4 --tokens 1,2,3 --out ref.npy > /dev/null 2>&1 || fail "zckpt logits on a good checkpoint"
  for args in "--out ref.npy --expect ref.npy|is the --expect reference" "--out o.npy --tolerance 0.1|--tolerance bounds the comparison with --expect" \
              "--out o.npy --expect ref.npy --tolerance -1|--tolerance: expected a number >= 0"; do
    set +e; $ZCKPT logits ck/step_4 --tokens 1,2,3 ${args%%|*} > z.out 2>&1; zrc=$?; set -e
    [ "$zrc" = 2 ] && grep -q -- "${args#*|}" z.out && echo "ok: zckpt logits refuses ${args%%|*}" \
      || fail "zckpt logits ${args%%|*}: exit $zrc, $(cat z.out)"
  done
  "$ZCKPT" logits ck/step_4 --tokens 1,2,3 --out o.npy --expect ref.npy > z.out 2>&1 && grep -q "^match" z.out \
    && echo "ok: zckpt logits matches its own reference" || fail "zckpt logits --expect: $(cat z.out)"
fi

# Fletcher32-only damage: a float of step_4's shard changed, its SHA-256 and
# the manifest's own re-recorded (nlohmann's dump() is Python's compact, sorted JSON).
rm -rf ck && cp -r pristine ck
python3 - ck/step_4 <<'PY'
import hashlib, json, struct, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
body = dict(m); want = body.pop("manifest_sha256")
canon = lambda j: hashlib.sha256(json.dumps(j, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()).hexdigest()
assert canon(body) == want, "the canonical manifest text differs from ztrain's"
f = d + "/rank_00000.h5"
b = bytearray(open(f, "rb").read())
# The states are small floats: find a run of 16 such and change one.
for i in range(4096, len(b) - 64, 4):
    v = struct.unpack_from("<16f", b, i)
    if all(0 < abs(x) < 0.2 for x in v):
        struct.pack_into("<f", b, i + 32, v[8] + 0.5)
        break
else:
    sys.exit("no weights found")
open(f, "wb").write(b)
body["files"]["rank_00000.h5"] = hashlib.sha256(b).hexdigest()
body["manifest_sha256"] = canon(body)
json.dump(body, open(d + "/manifest.json", "w"), indent=2)
PY
if [ -n "${ZCKPT:-}" ]; then
  set +e; "$ZCKPT" verify ck/step_4 > v.out 2>&1; vrc=$?; set -e
  [ "$vrc" = 1 ] && grep -q "rank_00000.h5" v.out && echo "ok: zckpt verify sees the Fletcher32 damage" || fail "verify Fletcher32: exit $vrc, $(cat v.out)"
fi
run_np 2 c.json --log-dir r --resume auto --steps 3
[ "$RC" = 0 ] && grep -q "ck/step_4 cannot be read; trying the checkpoint before it" "$WORK/out" && grep -q "resumed from ck/step_2 at step 2" "$WORK/out" \
  && echo "ok: --resume auto falls back past damage only Fletcher32 sees" || fail "Fletcher32 fallback: exit $RC"

# Another model with the same element counts per unit.
rm -rf ck && cp -r pristine ck
run_np 2 c.json --log-dir r --resume auto --steps 6 --set model.n_head=4
[ "$RC" = 2 ] && grep -q "ztrain: error: checkpoint ck/step_4 holds another model than this run's: model.n_head is 2 there, 4 in this run" "$WORK/out" \
  && echo "ok: another n_head is refused" || fail "n_head: exit $RC"
run_np 2 c.json --log-dir r --resume auto --steps 6 --set model.vocab_size=72 --set model.seq_len=8
[ "$RC" = 2 ] && grep -q 'holds another model than this run.s: tensor 0 is "embedding/wte.weight" of shape \[64,32\] there, "embedding/wte.weight" of shape \[72,32\] in this run' "$WORK/out" \
  && echo "ok: vocab_size and seq_len traded (same embedding size) are refused" || fail "vocab/seq: exit $RC"
run_np 2 c.json --log-dir r --resume auto --steps 6 --set model.activation_checkpointing=true
[ "$RC" = 0 ] && grep -q "resumed from ck/step_4" "$WORK/out" && echo "ok: activation checkpointing may change on resume" || fail "activation checkpointing: exit $RC"
finish
