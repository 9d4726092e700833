#!/usr/bin/env bash
# model.arch "llama" end to end on the CPU: a tiny Llama (4 query heads on 2
# key/value heads, Llama 3 rope scaling, untied head) trains on the Markov
# corpus under every parallel layout.
#
#  - Bits at every step: on one rank ZeRO 1 and activation checkpointing give
#    ZeRO 0's bits, ZeRO 3 (with and without checkpointing) ZeRO 2's; on 2 and
#    3 ranks likewise stage 1 gives stage 0's bits and stage 3 stage 2's.
#  - Across ranks and pipeline stages (np 1-3 x ZeRO 0-3; P = 2 with 1F1B and
#    interleaved with 2 chunks, the untied head on the last stage): step 1's
#    loss bits equal np 1's (the forward of the same weights on the same
#    samples), and every step is within 1e-5 relative. Later steps differ in
#    the last bits because gradients are summed in another order (stage 0/1
#    reduce whole buckets, 2/3 each unit's shard); GPT-2 does the same
#    (tests/apps/loss_bits.golden).
#  - The tied head (tie_word_embeddings) through the pipeline, where the table
#    lives on the first and the last stage, likewise.
#  - ZeRO-Offload (optimizer; optimizer and parameters) gives the bits of the
#    same run without it.
#  - bf16 and fp16 storage train; a checkpoint resumes with the same bits on
#    another layout; the loss falls; --estimate-memory works on every Llama
#    preset with the published parameter counts; config errors name the key.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
"$ZDATA" markov --out data/markov > zdata.out
cat > c.json <<'JSON'
{"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.004, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 2000, "allgather_bucket_size": 3000,
                       "stage3_param_persistence_threshold": 200, "stage3_prefetch_bucket_size": 8000},
 "model": {"arch": "llama", "n_layer": 4, "n_head": 4, "num_key_value_heads": 2, "d_model": 32,
           "intermediate_size": 72, "seq_len": 32, "vocab_size": 64, "rope_theta": 10000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 256}},
 "data": {"train": "data/markov/train.bin", "val": "data/markov/val.bin"},
 "train": {"steps": 8, "eval_interval": 4, "eval_steps": 2}}
JSON
STEPS=8

run_layout() {  # run_layout NAME NP settings...
  local name=$1 np=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  run_np "$np" c.json --log-dir "$name" "${sets[@]}"
  if [ "$RC" != 0 ]; then fail "$name: run failed"; return 1; fi
  losses "$name/metrics.jsonl" > "$name.loss"
  [ "$(wc -l < "$name.loss")" = "$STEPS" ] || { fail "$name: expected $STEPS losses"; return 1; }
}
same_bits() {  # same_bits NAME N: the first N losses of NAME equal np 1's (ref), as printed
  local n=$2
  if cmp -s <(head -n "$n" ref.loss) <(head -n "$n" "$1.loss"); then
    echo "ok: $1: loss bits of steps 1-$n equal np 1's"
  else
    fail "$1: loss bits differ from np 1's in steps 1-$n: $(paste -d' ' <(head -n "$n" ref.loss) <(head -n "$n" "$1.loss") | tr '\n' ';')"
  fi
}
close() {  # close NAME: every loss within 1e-5 relative of ref's
  if paste ref.loss "$1.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * $1) bad = 1 } END { exit bad }'; then
    echo "ok: $1: all $STEPS losses within 1e-5 of np 1's"
  else
    fail "$1: losses not within 1e-5 of np 1's"
  fi
}

run_layout ref 1 || true
first=$(head -1 ref.loss); last=$(tail -1 ref.loss)
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 0.3) }' \
  && echo "ok: loss falls from $first to $last in $STEPS steps" || fail "loss does not fall: $first -> $last"

same_as() {  # same_as NAME OTHER: every loss of NAME has OTHER's bits
  if cmp -s "$2.loss" "$1.loss"; then
    echo "ok: $1: loss bits of all $STEPS steps equal $2's"
  else
    fail "$1: loss bits differ from $2's: $(paste -d' ' "$2.loss" "$1.loss" | tr '\n' ';')"
  fi
}
cp ref.loss np1-z0.loss
run_layout np1-z1 1 zero_optimization.stage=1 && same_as np1-z1 np1-z0
run_layout np1-ckpt 1 model.activation_checkpointing=true && same_as np1-ckpt np1-z0
for np in 1 2 3; do
  for stage in 0 1 2 3; do
    name=np$np-z$stage
    [ "$np$stage" = 10 ] && continue
    [ "$np$stage" = 11 ] && continue
    run_layout "$name" $np zero_optimization.stage=$stage || continue
    same_bits "$name" 1
    close "$name"
  done
  [ "$np" = 1 ] || same_as np$np-z1 np$np-z0
  same_as np$np-z3 np$np-z2
done
run_layout np1-z3-ckpt 1 zero_optimization.stage=3 model.activation_checkpointing=true && same_as np1-z3-ckpt np1-z2
run_layout np2-p2-1f1b 2 pipeline.parallel_size=2 && { same_bits np2-p2-1f1b 1; close np2-p2-1f1b; }
run_layout np2-p2v2-int-z3-ckpt 2 pipeline.parallel_size=2 'pipeline.pipe_schedule_name="interleaved"' \
  pipeline.num_chunks=2 zero_optimization.stage=3 model.activation_checkpointing=true \
  && { same_bits np2-p2v2-int-z3-ckpt 1; close np2-p2v2-int-z3-ckpt; }

# ZeRO-Offload: the optimizer (stage 2), and also the parameters (stage 3), in
# host memory give the bits of the same run without offload.
run_layout np2-z2-offload 2 zero_optimization.stage=2 'zero_optimization.offload_optimizer={"device": "cpu"}' \
  && same_as np2-z2-offload np2-z2
run_layout np2-z3-offload 2 zero_optimization.stage=3 'zero_optimization.offload_optimizer={"device": "cpu"}' \
  'zero_optimization.offload_param={"device": "cpu"}' && same_as np2-z3-offload np2-z3

# Tied head: np 1 against the interleaved pipeline (embedding on stage 0, its
# table also read by the head on stage 1).
run_layout tied-np1 1 model.tie_word_embeddings=true && cp tied-np1.loss ref-tied.loss
if [ -f ref-tied.loss ]; then
  cmp -s ref.loss tied-np1.loss && fail "tie_word_embeddings changed nothing" || echo "ok: the tied model is another model"
  cp ref.loss ref-untied.loss; cp ref-tied.loss ref.loss
  run_layout tied-np2-p2v2-int-z1 2 model.tie_word_embeddings=true pipeline.parallel_size=2 \
    'pipeline.pipe_schedule_name="interleaved"' pipeline.num_chunks=2 zero_optimization.stage=1 \
    && { same_bits tied-np2-p2v2-int-z1 1; close tied-np2-p2v2-int-z1; }
  cp ref-untied.loss ref.loss
fi

# 16-bit storage trains (its bits are its own).
for prec in bf16 fp16; do
  run_layout "np2-z2-$prec" 2 zero_optimization.stage=2 "$prec.enabled=true" || continue
  f=$(head -1 "np2-z2-$prec.loss"); l=$(tail -1 "np2-z2-$prec.loss")
  awk -v f="$f" -v l="$l" -v r="$first" 'BEGIN { d = f - r; if (d < 0) d = -d; exit !(l < f - 0.3 && d < 0.01) }' \
    && echo "ok: $prec: first loss $f (fp32 $first), falls to $l" || fail "$prec: first loss $f, last $l"
done

# Checkpoint and resume: 4 steps, save, 4 more from the checkpoint = 8 straight.
run_np 2 c.json --log-dir ck1 --steps 4 --set zero_optimization.stage=3 --set checkpoint.dir=ckpt --set checkpoint.interval=4
[ "$RC" = 0 ] || fail "checkpointed run failed"
run_np 3 c.json --log-dir ck2 --resume auto --set zero_optimization.stage=1 --set checkpoint.dir=ckpt
if [ "$RC" = 0 ]; then
  losses ck2/metrics.jsonl > ck2.loss
  losses np2-z3/metrics.jsonl | tail -4 > want.loss
  # Resharded onto 3 ranks at stage 1: the restored weights are exact, so the
  # first resumed loss is np 2's bit for bit.
  if [ "$(head -1 ck2.loss)" = "$(head -1 want.loss)" ] && [ "$(wc -l < ck2.loss)" = 4 ]; then
    echo "ok: resumed (np 2 ZeRO-3 -> np 3 ZeRO-1) step 5 loss equals the straight run's bits"
  else
    fail "resume: $(head -1 ck2.loss) vs $(head -1 want.loss)"
  fi
else
  fail "resume failed"
fi

# The memory estimator on every Llama preset.
for p in llama-tiny llama2-7b llama2-13b llama2-70b llama3-8b llama3-70b llama3.1-8b llama3.1-70b; do
  set +e
  "$ZTRAIN" c.json --estimate-memory --world 64 --set "model={\"preset\": \"$p\"}" --set zero_optimization.stage=3 \
    --set train_batch_size=128 --set train_micro_batch_size_per_gpu=1 \
    > "est-$p.out" 2>&1
  rc=$?
  set -e
  if [ $rc = 0 ] && grep -q "memory per rank" "est-$p.out"; then
    echo "ok: --estimate-memory $p: $(grep -o '[0-9,]* parameters' "est-$p.out" | head -1)"
  else
    fail "--estimate-memory on preset $p (exit $rc): $(tail -2 "est-$p.out")"
  fi
done
grep -q "6,738,415,616 parameters" est-llama2-7b.out && echo "ok: llama2-7b has Llama-2-7b's 6,738,415,616 parameters" \
  || fail "llama2-7b parameter count: $(grep -o '[0-9,]* parameters' est-llama2-7b.out | head -1)"
grep -q "8,030,261,248 parameters" est-llama3-8b.out && echo "ok: llama3-8b has Llama-3-8B's 8,030,261,248 parameters" \
  || fail "llama3-8b parameter count: $(grep -o '[0-9,]* parameters' est-llama3-8b.out | head -1)"

# Errors name the key.
expect_error "gpt2 refuses a llama key" 2 "model.rope_theta: applies to model.arch \"llama\" only" \
  c.json --set 'model={"preset": "tiny", "rope_theta": 500000}'
expect_error "unsupported rope scaling" 2 "model.rope_scaling.rope_type: rope scaling \"yarn\" is not supported" \
  c.json --set 'model.rope_scaling={"rope_type": "yarn", "factor": 4}'
expect_error "kv heads must divide heads" 2 "model.num_key_value_heads: num_key_value_heads \(3\) must divide n_head \(4\)" \
  c.json --set model.num_key_value_heads=3
expect_error "llama3 scaling needs its keys" 2 "model.rope_scaling.original_max_position_embeddings: required" \
  c.json --set 'model.rope_scaling={"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4}'
expect_error "preset and arch disagree" 2 "model.arch: \"gpt2\" contradicts preset \"llama2-7b\"" \
  c.json --set 'model={"preset": "llama2-7b", "arch": "gpt2"}'
finish
