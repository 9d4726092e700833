#!/usr/bin/env bash
# Packed fine-tuning rows (data.packing, [Note: packed rows] in
# src/io/packing.hpp) through the CPU trainer.
#
#  - Masking isolates the examples: with every example whole in its rows and
#    one global batch holding every row, the step-1 loss of rows packed with
#    several examples equals, to rounding, the loss of the same examples one
#    per row (a shorter sequence length), for GPT-2 (positions restart per
#    example) and Llama (rotary positions restart); the same data read as
#    plain windows (no packing), whose inputs hold the same tokens, differs.
#  - Masked targets carry no gradient under packing either: a mask with the
#    example starts and no counted target gives a gradient norm of exactly 0,
#    no loss and 0 tokens/s.
#  - Layouts: np 1 and 2, ZeRO 0-3 and a 2-stage pipeline (every stage needs
#    the documents) give np 1's loss bits at step 1 and agree to 1e-5 after,
#    for GPT-2 and Llama, on data with examples longer than a row (truncated);
#    the loss falls; a packed val split gives a finite val loss.
#  - A run resumed from a checkpoint continues with the same rows, bit for bit.
#  - data.packing on data without example starts is refused by name.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
TOK="$SRC/tests/io/data/tok_gpt2.json"

# 60 short examples (13 to 19 tokens) and 6 long ones (over 33 tokens,
# first, so that they are in the train split).
words=(apple river stone cloud green night music table paper light dream water)
for i in $(seq 0 59); do
  w=${words[$((i % 12))]}
  case $((i % 3)) in
    0) p="Repeat twice: $w" c=" $w $w" ;;
    1) p="Say the word: $w" c=" $w." ;;
    2) p="Shout: $w" c=" ${w^^}!" ;;
  esac
  echo "{\"prompt\": \"$p\\n\", \"completion\": \"$c\"}"
done > short.jsonl
for i in $(seq 0 5); do
  w=${words[$i]}
  echo "{\"prompt\": \"List the word $w many times:\\n\", \"completion\": \"$w $w $w $w $w $w $w $w $w $w $w $w $w $w $w $w $w $w $w $w.\"}"
done > long.jsonl
"$ZDATA" finetune --tokenizer "$TOK" --format prompt_completion --out eq short.jsonl > zdata.out \
  && "$ZDATA" finetune --tokenizer "$TOK" --format prompt_completion --val-fraction 0.2 --out ft long.jsonl short.jsonl \
  >> zdata.out || { cat zdata.out; fail "zdata finetune failed"; finish; }

cat > c.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.95], "weight_decay": 0.0}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 4000, "allgather_bucket_size": 6000,
                       "stage3_param_persistence_threshold": 200, "stage3_prefetch_bucket_size": 40000},
 "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 32, "vocab_size": 1200},
 "data": {"train": "ft/train.bin", "packing": true},
 "train": {"steps": 8, "eval_interval": 8, "eval_steps": 2}}
JSON
LLAMA=('model.arch="llama"' model.n_head=4 model.num_key_value_heads=2 model.intermediate_size=64)

VAL='data.val="ft/val.bin"'
run() {  # run NAME NP settings...: metrics in NAME/metrics.jsonl, losses in NAME.loss, log in NAME.out
  local name=$1 np=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  run_np "$np" c.json --log-dir "$name" "${sets[@]}"
  cp "$WORK/out" "$name.out"
  if [ "$RC" != 0 ]; then fail "$name: run failed"; return 1; fi
  losses "$name/metrics.jsonl" > "$name.loss"
  grep '"step"' "$name/metrics.jsonl" | grep -o '"grad_norm":[^,}]*' | cut -d: -f2 > "$name.gnorm"
}
rows_of() { grep -o 'into [0-9]* rows' "$1.out" | head -1 | cut -d' ' -f2; }

# ---- masking isolates the examples ----
one_batch() {  # one_batch NAME ARCH_SETTINGS... : step-1 loss with every row in one global batch
  local name=$1
  shift
  local T=$1
  shift
  run "$name-probe" 1 model.seq_len="$T" 'data.train="eq/train.bin"' train.steps=1 \
    train_batch_size=1 train_micro_batch_size_per_gpu=1 "$@" || return 1
  local R
  R=$(rows_of "$name-probe")
  run "$name" 1 model.seq_len="$T" 'data.train="eq/train.bin"' train.steps=1 \
    train_batch_size="$R" train_micro_batch_size_per_gpu=1 "$@" || return 1
  echo "$name: $R rows of $T + 1"
}
for arch in gpt llama; do
  extra=()
  [ "$arch" = llama ] && extra=("${LLAMA[@]}")
  one_batch "$arch-packed" 64 "${extra[@]}" || continue
  one_batch "$arch-alone" 20 "${extra[@]}" || continue
  p=$(head -1 "$arch-packed.loss") a=$(head -1 "$arch-alone.loss")
  rp=$(rows_of "$arch-packed") ra=$(rows_of "$arch-alone")
  if [ "$ra" = 60 ] && [ "$rp" -lt 20 ] && grep -q " 0 examples longer" "$arch-packed.out" \
    && awk -v p="$p" -v a="$a" 'BEGIN { d = p - a; if (d < 0) d = -d; exit !(d < 1e-7 * a) }'; then
    echo "ok: $arch: $rp packed rows give the loss of the 60 examples one per row ($p vs $a)"
  else
    fail "$arch: packed ($rp rows) loss $p != one example per row ($ra rows) loss $a"
  fi
  # The same rows' tokens as plain windows of 64 (one batch of every window):
  # the examples then see each other, and the loss differs.
  run "$arch-plain" 1 model.seq_len=64 'data.train="eq/train.bin"' data.packing=false train.steps=1 \
    train_batch_size=14 train_micro_batch_size_per_gpu=1 "${extra[@]}" || continue
  w=$(head -1 "$arch-plain.loss")
  awk -v p="$p" -v w="$w" 'BEGIN { d = p - w; if (d < 0) d = -d; exit !(d > 1e-5 * p) }' \
    && echo "ok: $arch: without packing the loss differs ($w vs $p)" || fail "$arch: plain windows loss $w == packed $p"
done

# ---- masked targets carry no gradient ----
# ft's mask with every loss bit cleared and the example starts kept
# ([Note: loss mask file] in src/io/loss_mask.hpp).
mkdir -p zero
cp ft/train.bin zero/train.bin
perl -e 'local $/; my $b = <STDIN>; my $h = substr($b, 0, 24); print $h, join("", map { chr(ord($_) & 2) } split //, substr($b, 24))' \
  < ft/train.mask > zero/train.mask
if run zeros 1 'data.train="zero/train.bin"' train.steps=3; then
  zt=$(grep '"step"' zeros/metrics.jsonl | grep -o '"tokens_per_s":[^,}]*' | cut -d: -f2 | sort -u)
  if [ "$(sort -u zeros.gnorm)" = "0.0" ] && [ "$(sort -u zeros.loss)" = "null" ] && [ "$zt" = "0.0" ]; then
    echo "ok: packed rows without a counted target: zero gradient, no loss, 0 tokens/s"
  else
    fail "no counted target: grad norms $(tr '\n' ' ' < zeros.gnorm), losses $(tr '\n' ' ' < zeros.loss), tok/s $zt"
  fi
fi

# ---- layouts ----
close() {  # close NAME REF: step 1 bits equal, all within 1e-5 relative
  if [ "$(head -1 "$1.loss")" = "$(head -1 "$2.loss")" ]; then
    echo "ok: $1: step 1 loss bits equal $2's"
  else
    fail "$1: step 1 loss $(head -1 "$1.loss") != $2's $(head -1 "$2.loss")"
  fi
  if paste "$2.loss" "$1.loss" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * $1) bad = 1 } END { exit bad }'; then
    echo "ok: $1: losses within 1e-5 of $2's"
  else
    fail "$1: losses not within 1e-5 of $2's: $(paste "$2.loss" "$1.loss" | tr '\n' ';')"
  fi
}
if run gpt-np1-z0 1 "$VAL"; then
  grep -q "examples longer than 33 tokens truncated" gpt-np1-z0.out && ! grep -q " 0 examples longer" gpt-np1-z0.out \
    && echo "ok: long examples truncated" || fail "no truncated example reported: $(grep packing gpt-np1-z0.out)"
  f=$(head -1 gpt-np1-z0.loss) l=$(tail -1 gpt-np1-z0.loss)
  awk -v f="$f" -v l="$l" 'BEGIN { exit !(l < f - 1.0) }' && echo "ok: loss falls from $f to $l" \
    || fail "loss does not fall: $f -> $l"
  v=$(field gpt-np1-z0/metrics.jsonl val_loss)
  awk -v v="$v" 'BEGIN { exit !(v > 0 && v < 20) }' && echo "ok: packed val loss $v" || fail "val loss '$v'"
fi
run gpt-np2-z0 2 "$VAL" && close gpt-np2-z0 gpt-np1-z0
run gpt-np1-z3 1 "$VAL" zero_optimization.stage=3 && close gpt-np1-z3 gpt-np1-z0
run gpt-np2-z1 2 "$VAL" zero_optimization.stage=1 && close gpt-np2-z1 gpt-np1-z0
run gpt-np2-z2 2 "$VAL" zero_optimization.stage=2 && close gpt-np2-z2 gpt-np1-z0
run gpt-np2-z3 2 "$VAL" zero_optimization.stage=3 && close gpt-np2-z3 gpt-np1-z0
run gpt-np2-p2 2 "$VAL" pipeline.parallel_size=2 && close gpt-np2-p2 gpt-np1-z0
# Interleaved (two chunks a stage) with checkpointing: 4 layers.
run gpt4-np1-z0 1 "$VAL" model.n_layer=4 || true
run gpt4-np2-p2v2 2 "$VAL" model.n_layer=4 pipeline.parallel_size=2 pipeline.pipe_schedule_name='"interleaved"' \
  pipeline.num_chunks=2 model.activation_checkpointing=true && close gpt4-np2-p2v2 gpt4-np1-z0

run llama-np1-z0 1 "$VAL" "${LLAMA[@]}" || true
run llama-np2-z3 2 "$VAL" "${LLAMA[@]}" zero_optimization.stage=3 && close llama-np2-z3 llama-np1-z0
run llama-np2-p2 2 "$VAL" "${LLAMA[@]}" pipeline.parallel_size=2 && close llama-np2-p2 llama-np1-z0

# ---- resume: 4 steps, a restart with --resume auto and 4 more give the
# bits of 8 straight (the rows depend on the seed and the step only) ----
run_np 1 c.json --log-dir rb --set "$VAL" --set checkpoint.dir='"ck"' --set checkpoint.interval=4 --steps 4
run_np 1 c.json --log-dir rc --set "$VAL" --set checkpoint.dir='"ck"' --set checkpoint.interval=4 --resume auto
if [ "$RC" = 0 ] && grep -q "resumed from ck/step_4 at step 4" "$WORK/out"; then
  losses rc/metrics.jsonl > rc.loss
  tail -4 gpt-np1-z0.loss > ra.loss
  [ -s rc.loss ] && cmp -s ra.loss rc.loss && echo "ok: a resumed packed run is bit-exact" \
    || fail "resume: $(tr '\n' ' ' < rc.loss) vs $(tr '\n' ' ' < ra.loss)"
else
  fail "packed run did not resume"
fi

# ---- errors ----
cp ft/train.bin plain.bin
expect_error "packing data without example starts" 2 'data.packing: data.train .*plain.bin.* no example boundaries' \
  c.json --set 'data.train="plain.bin"'
finish
