#!/usr/bin/env bash
# What a run is asked to do is checked before it trains (docs/reliability.md):
#  - --resume with --steps below the checkpoint's step is refused (exit 2);
#    at exactly its step the run says there is nothing to train;
#  - --world below 1, or without --estimate-memory, is refused;
#  - checkpoint.dir is checked at start: a regular file, a directory that
#    cannot be written, one that holds another run's checkpoints;
#  - a save that fails removes its step_N.tmp.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > c.json <<'JSON'
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
 "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 64},
 "checkpoint": {"dir": "ck", "interval": 2},
 "train": {"steps": 4, "eval_interval": 0}}
JSON
trained() { grep -q "step      1/" "$WORK/out"; }
run_np 2 c.json --log-dir base
[ "$RC" = 0 ] && [ -d ck/step_4 ] || fail "base run: exit $RC"

run_np 2 c.json --log-dir r --resume auto --steps 3
[ "$RC" = 2 ] && grep -q "ztrain: error: --resume: checkpoint ck/step_4 is at step 4, past train.steps = 3 (--steps): nothing to train" "$WORK/out" \
  && echo "ok: --steps below the checkpoint's step is refused" || fail "--steps below: exit $RC"
run_np 2 c.json --log-dir r --resume auto --steps 4
[ "$RC" = 0 ] && grep -q "the checkpoint is at train.steps = 4 already: nothing to train" "$WORK/out" \
  && echo "ok: --steps at the checkpoint's step says there is nothing to train" || fail "--steps equal: exit $RC"

for w in -1 0; do
  expect_error "--estimate-memory --world $w" 2 "command line: --world: expected a number of ranks >= 1, found $w" \
    c.json --estimate-memory --world "$w"
done
expect_error "--world without --estimate-memory" 2 "command line: --world is for --estimate-memory only" c.json --world 4

# checkpoint.dir at start.
touch afile
run_np 2 c.json --log-dir f --set checkpoint.dir='"afile"'
[ "$RC" = 2 ] && grep -q "checkpoint.dir 'afile' exists and is not a directory" "$WORK/out" && ! trained \
  && echo "ok: a checkpoint.dir that is a file is refused at start" || fail "file as checkpoint.dir: exit $RC"
# /proc/self: a directory no one can create files in, root included.
run_np 2 c.json --log-dir f --set checkpoint.dir='"/proc/self"'
[ "$RC" = 2 ] && grep -q "checkpoint.dir '/proc/self' is not writable" "$WORK/out" && ! trained \
  && echo "ok: an unwritable checkpoint.dir is refused at start" || fail "unwritable checkpoint.dir: exit $RC"
run_np 2 c.json --log-dir f
[ "$RC" = 2 ] && grep -q "checkpoint.dir 'ck' holds checkpoints already (ck/step_[0-9]*): continue that run with --resume auto" "$WORK/out" \
  && ! trained && echo "ok: a fresh run into another run's checkpoints is refused at start" || fail "another run's dir: exit $RC"

# A failed save (a full disk, injected on rank 1) leaves no staging dir.
ZT_INJECT_FAULT="write-error:rank=1,step=2" run_np 2 c.json --log-dir w --set checkpoint.dir='"ckw"'
[ "$RC" = 1 ] && grep -q "No space left on device (injected)" "$WORK/out" && [ -d ckw ] && [ -z "$(ls -A ckw)" ] \
  && echo "ok: a failed save removes its step_N.tmp" || fail "failed save: exit $RC, $(ls -A ckw 2>/dev/null | tr '\n' ' ')"
finish
