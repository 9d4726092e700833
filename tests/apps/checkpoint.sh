#!/usr/bin/env bash
# Sharded checkpoints end to end:
#  - bit-exact resume: 2N steps straight equal N steps, a restart with
#    --resume auto and N more steps, identical loss bits at every step, for
#    ZeRO stages 0-3 and with pipelining (the sampler and schedule continue);
#  - resharding on load: saved at DP=4 ZeRO-3, resumed at DP=2 ZeRO-1 and at
#    DP=1; saved at P=2,V=2, resumed at P=1: within 1e-5 of the uninterrupted run;
#  - faults: a rank killed with SIGKILL in the middle of a save leaves the
#    previous checkpoint, which --resume auto uses; a flipped byte is named by
#    zckpt verify and by --resume PATH, and auto falls back with a warning; a
#    checkpoint directory that cannot be created is a clear error; SIGTERM (and SIGUSR1)
#    mid-run saves and exits 0;
#  - checkpoint.dir without an interval warns and saves at the end
#    (save_at_end); a resumed run appends to metrics.jsonl and marks the
#    resume, a fresh one starts it anew.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > c.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1, "gradient_clipping": 0.5,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "warmup_num_steps": 3}},
 "zero_optimization": {"stage": 0, "stage3_param_persistence_threshold": 100},
 "model": {"n_layer": 4, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 64},
 "checkpoint": {"dir": "ck", "interval": 5, "keep_last": 3},
 "train": {"steps": 10, "eval_interval": 0}}
JSON
tail_losses() { losses "$1" | tail -"$2"; }
within() {  # within A B NAME TOL
  if [ -s "$1" ] && paste "$1" "$2" | awk -v t="$4" '{ d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > t * $1) bad = 1 } END { exit bad || NR == 0 }'; then
    echo "ok: $3"
  else
    fail "$3: $(tr '\n' ' ' < "$1") vs $(tr '\n' ' ' < "$2")"
  fi
}

for stage in 0 1 2 3; do
  rm -rf ck
  run_np 2 c.json --log-dir a$stage --set zero_optimization.stage=$stage --set checkpoint.dir='"cka_'$RANDOM$RANDOM'"'
  run_np 2 c.json --log-dir b$stage --set zero_optimization.stage=$stage --steps 5
  run_np 2 c.json --log-dir c$stage --set zero_optimization.stage=$stage --resume auto
  [ "$RC" = 0 ] && grep -q "resumed from ck/step_5 at step 5" "$WORK/out" || fail "stage $stage: resume"
  tail_losses a$stage/metrics.jsonl 5 > x; losses c$stage/metrics.jsonl > y
  if [ -s x ] && cmp -s x y; then echo "ok: ZeRO-$stage resume is bit-exact"; else fail "ZeRO-$stage resume differs"; fi
done

pp=(--set pipeline.parallel_size=2 --set pipeline.pipe_schedule_name='"interleaved"' --set pipeline.num_chunks=2)
rm -rf ck
run_np 2 c.json --log-dir pa "${pp[@]}" --set zero_optimization.stage=1 --set checkpoint.dir='"cka_'$RANDOM$RANDOM'"'
run_np 2 c.json --log-dir pb "${pp[@]}" --set zero_optimization.stage=1 --steps 5
run_np 2 c.json --log-dir pc "${pp[@]}" --set zero_optimization.stage=1 --resume auto
tail_losses pa/metrics.jsonl 5 > x; losses pc/metrics.jsonl > y
if [ -s x ] && cmp -s x y; then echo "ok: pipeline resume is bit-exact"; else fail "pipeline resume differs"; fi
# Reshard: the P=2,V=2 checkpoint into one process.
run_np 1 c.json --log-dir pr --resume ck/step_5 --set checkpoint.dir='"ckp1"'
losses pr/metrics.jsonl > y
within x y "P=2,V=2 checkpoint resumed at P=1 within 1e-5" 1e-5

# Reshard: DP=4 ZeRO-3 into DP=2 ZeRO-1 and DP=1 ZeRO-0.
rm -rf ck
run_np 4 c.json --log-dir d4 --set zero_optimization.stage=3 --set checkpoint.dir='"cka_'$RANDOM$RANDOM'"'
run_np 4 c.json --log-dir d4b --set zero_optimization.stage=3 --steps 5
tail_losses d4/metrics.jsonl 5 > x
cp -r ck ck_saved
run_np 2 c.json --log-dir d2 --set zero_optimization.stage=1 --resume ck_saved/step_5 --set checkpoint.dir='"ck2"'
losses d2/metrics.jsonl > y
within x y "DP=4 ZeRO-3 checkpoint resumed at DP=2 ZeRO-1 within 1e-5" 1e-5
run_np 1 c.json --log-dir d1 --resume ck_saved/step_5 --set checkpoint.dir='"ck1"'
losses d1/metrics.jsonl > y
within x y "DP=4 ZeRO-3 checkpoint resumed at DP=1 within 1e-5" 1e-5

# Async saves: written by a background thread while training goes on; the
# resume is as bit-exact as from a synchronous save.
rm -rf ck
run_np 2 c.json --log-dir as1 --set zero_optimization.stage=2 --steps 5 --set checkpoint.async=true
run_np 2 c.json --log-dir as2 --set zero_optimization.stage=2 --resume auto --set checkpoint.async=true
tail_losses a2/metrics.jsonl 5 > x; losses as2/metrics.jsonl > y
if [ -s x ] && cmp -s x y && [ -d ck/step_10 ]; then echo "ok: async save resumes bit-exactly"; else fail "async save"; fi
# A background write that fails is reported and never published.
ZT_INJECT_FAULT="write-error:rank=1,step=10" run_np 2 c.json --log-dir aw --set checkpoint.async=true \
  --set checkpoint.dir='"ckw"' --set zero_optimization.stage=2
if [ "$RC" = 1 ] && grep -q "No space left on device (injected)" "$WORK/out" && [ -d ckw/step_5 ] && [ ! -d ckw/step_10 ] \
   && grep -q "not published" "$WORK/out"; then
  echo "ok: a failed background write is reported and not published"
else
  fail "failed async write: exit $RC, $(ls ckw 2>/dev/null | tr '\n' ' ')"
fi

# gather_16bit_weights_on_model_save: consolidated bf16 weights beside the
# shards (one file per pipeline stage), listed in the manifest and verified.
run_np 4 c.json --log-dir g16 --steps 5 --set checkpoint.dir='"ck16"' --set zero_optimization.stage=3 \
  --set zero_optimization.stage3_gather_16bit_weights_on_model_save=true "${pp[@]}"
w=ck16/step_5/model_16bit_stage1.safetensors
if [ "$RC" = 0 ] && [ -s ck16/step_5/model_16bit_stage0.safetensors ] && [ -s "$w" ] \
   && grep -q '"model_16bit_stage1.safetensors"' ck16/step_5/manifest.json && grep -aq '"h.3.mlp.c_proj.weight"' "$w" \
   && grep -aq '"BF16"' "$w"; then
  echo "ok: 16-bit weights written beside the shards"
else
  fail "gather_16bit_weights_on_model_save"
fi
if [ -n "${ZCKPT:-}" ]; then
  "$ZCKPT" verify ck16/step_5 > v16.out 2>&1 && echo "ok: zckpt verify accepts them" || fail "verify with 16-bit weights"
  "$ZCKPT" export ck/step_5 --out hf --dtype bf16 > ex.out 2>&1 && [ -s hf/model.safetensors ] && [ -s hf/config.json ] \
    && echo "ok: zckpt export writes safetensors and config.json" || fail "zckpt export: $(cat ex.out)"
fi

# A rank killed in the middle of saving step 10: step 5 stays and is used.
rm -rf ck
ZT_INJECT_FAULT="kill-in-save:rank=1,step=10" run_np 2 c.json --log-dir k
[ "$RC" != 0 ] || fail "the killed run exited 0"
[ -d ck/step_5 ] && [ ! -d ck/step_10 ] && echo "ok: the killed save was not published" || fail "after the kill: $(ls ck)"
run_np 2 c.json --log-dir k2 --resume auto
[ "$RC" = 0 ] && grep -q "resumed from ck/step_5" "$WORK/out" && echo "ok: resume auto after the kill uses step 5" \
  || fail "resume after the kill"

# A flipped byte in a shard file of the newest checkpoint (step 10 now).
f=$(ls ck/step_10/rank_*.h5 | head -1)
size=$(stat -c %s "$f")
printf '\xff' | dd of="$f" bs=1 seek=$((size / 2)) count=1 conv=notrunc status=none
if [ -n "${ZCKPT:-}" ]; then
  set +e; "$ZCKPT" verify ck/step_10 > v.out 2>&1; vrc=$?; set -e
  [ "$vrc" = 1 ] && grep -q "$(basename "$f")" v.out && echo "ok: zckpt verify names the corrupt file" \
    || fail "zckpt verify: exit $vrc, $(cat v.out)"
fi
run_np 2 c.json --log-dir r1 --resume ck/step_10
[ "$RC" = 2 ] && grep -q "$(basename "$f")" "$WORK/out" && echo "ok: --resume PATH names the corrupt file" \
  || fail "--resume PATH on a corrupt checkpoint: exit $RC"
run_np 2 c.json --log-dir r2 --resume auto --steps 6
[ "$RC" = 0 ] && grep -q "skipping.*step_10" "$WORK/out" && grep -q "resumed from ck/step_5" "$WORK/out" \
  && echo "ok: resume auto falls back to step 5 with a warning" || fail "resume auto past a corrupt checkpoint"

# A checkpoint directory that cannot be created: a clear error at start, nothing lost.
touch afile
run_np 2 c.json --log-dir e --set checkpoint.dir='"afile/ck"'
[ "$RC" = 2 ] && grep -q "checkpoint.dir 'afile/ck': cannot create directory" "$WORK/out" && [ "$(grep -c 'ztrain: error' "$WORK/out")" = 1 ] \
  && ! grep -q "step      1/" "$WORK/out" && echo "ok: an unwritable checkpoint directory is a clear error at start" || fail "unwritable checkpoint dir: exit $RC"

# SIGTERM or SIGUSR1 mid-run: a checkpoint at the current step, exit 0.
cat > slow.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
 "model": {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 64, "vocab_size": 64},
 "checkpoint": {"dir": "ck"}, "train": {"steps": 100000, "eval_interval": 0}}
JSON
for sig in TERM USR1; do
  rm -rf ck t t.out
  set +e
  # shellcheck disable=SC2086
  "$MPIEXEC" $MPI_FLAGS --bind-to none -np 2 "$ZTRAIN" slow.json --log-dir t > t.out 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do grep -q "step      3/" t.out 2>/dev/null && break; sleep 0.2; done
  # To the ranks, as SLURM's srun delivers it (mpirun itself would report the signal).
  pkill -$sig -P $pid
  wait $pid
  trc=$?
  set -e
  saved=$(ls ck 2>/dev/null | grep -c '^step_[0-9]*$')
  if [ "$trc" = 0 ] && [ "$saved" = 1 ] && grep -q "stop signal received: checkpoint saved" t.out; then
    echo "ok: SIG$sig saved $(ls ck | grep '^step_') and exited 0"
  else
    fail "SIG$sig: exit $trc, $saved checkpoints; $(tail -3 t.out)"
  fi
done

# SIGTERM to jobs/local.sh (how a batch system or kill ends the job): it
# reaches the ranks as SIGUSR1 through mpirun, so they save and the job exits
# 0 (mpirun answers SIGTERM itself by killing the ranks and exiting 1).
rm -rf ck t t.out
set +e
BUILD_DIR=$(dirname "$(dirname "$ZTRAIN")") "$SRC/jobs/local.sh" 2 "$WORK/slow.json" --log-dir "$WORK/t" \
  --set checkpoint.dir="\"$WORK/ck\"" > t.out 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q "step      3/" t.out 2>/dev/null && break; sleep 0.2; done
kill -TERM $pid
wait $pid
trc=$?
set -e
saved=$(ls ck 2>/dev/null | grep -c '^step_[0-9]*$')
if [ "$trc" = 0 ] && [ "$saved" = 1 ] && grep -q "stop signal received: checkpoint saved" t.out; then
  echo "ok: SIGTERM to jobs/local.sh saved $(ls ck | grep '^step_') and exited 0"
else
  fail "SIGTERM to jobs/local.sh: exit $trc, $saved checkpoints; $(tail -3 t.out)"
fi

# checkpoint.dir without an interval: the run warns and saves at its end
# (save_at_end, on by default; off: nothing is saved). A resumed run appends
# to metrics.jsonl and marks the resume instead of truncating the records of
# the steps before it.
E=(--set checkpoint.interval=0 --set checkpoint.dir='"cke"')
run_np 1 c.json --log-dir e "${E[@]}" --steps 4
if [ "$RC" = 0 ] && [ -d cke/step_4 ] && grep -q "only at the end of the run" "$WORK/out"; then
  echo "ok: checkpoint.dir without an interval warns and saves at the end"
else
  fail "save at the end: exit $RC, $(ls cke 2>/dev/null | tr '\n' ' ')"
fi
run_np 1 c.json --log-dir e "${E[@]}" --resume auto
n=$(losses e/metrics.jsonl | wc -l)
r=$(grep -c '"event":"resume"' e/metrics.jsonl || true)
first=$(grep -m1 '"step"' e/metrics.jsonl | grep -o '"step":[0-9]*')
if [ "$RC" = 0 ] && [ "$n" = 10 ] && [ "$r" = 1 ] && [ "$first" = '"step":1' ] &&
   grep -q '"event":"resume","from":"[^"]*step_4","step":4' e/metrics.jsonl; then
  echo "ok: a resumed run appends to metrics.jsonl and marks the resume"
else
  fail "metrics after resume: exit $RC, $n steps, $r resume records, first $first"
fi
# A fresh run into a checkpoint.dir that already holds checkpoints (another
# run's) is refused at start; they are left as they were.
before=$(sha256sum cke/step_4/* | sha256sum)
run_np 1 c.json --log-dir e3 "${E[@]}" --steps 4
if [ "$RC" = 2 ] && grep -q "holds checkpoints already" "$WORK/out" && [ "$(sha256sum cke/step_4/* | sha256sum)" = "$before" ]; then
  echo "ok: a fresh run into a checkpoint.dir of another run is refused at start"
else
  fail "fresh run over existing checkpoints: exit $RC"
fi
# A fresh run in the same log directory starts its metrics.jsonl anew.
run_np 1 c.json --log-dir e --set checkpoint.interval=0 --set checkpoint.dir='"ckf"' --set checkpoint.save_at_end=false --steps 3
if [ "$RC" = 0 ] && [ ! -e ckf/step_3 ] && [ "$(losses e/metrics.jsonl | wc -l)" = 3 ] &&
   ! grep -q '"event":"resume"' e/metrics.jsonl; then
  echo "ok: save_at_end false saves nothing at the end; a fresh run starts metrics.jsonl anew"
else
  fail "save_at_end false: exit $RC, $(ls ckf 2>/dev/null | tr '\n' ' ')"
fi
finish
