#!/usr/bin/env bash
# Fine-tuning data with a loss mask (zdata finetune, [Note: masked targets] in
# src/train/data_feed.hpp) through the CPU trainer.
#
#  - Masked targets contribute nothing: an all-zero mask gives a gradient
#    norm of exactly 0 at every step (and no loss: null); an all-one mask gives
#    the bits of the same shard without a mask file (the weights 1/count and
#    the targets are then the plain run's); two complementary masks (even and
#    odd corpus positions: T/2 counted targets per window each) have step-1
#    losses whose mean is the unmasked loss, to rounding.
#  - Data from zdata finetune (prompt/completion, GPT-2 test tokenizer): the
#    loss falls; np 1 and 2, ZeRO 0 and 3, and a 2-stage pipeline give np 1's
#    loss bits at step 1 and agree to 1e-5 after; a masked val split gives a
#    finite val loss; the same for a tiny Llama.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
TOK="$SRC/tests/io/data/tok_gpt2.json"

# 240 examples: the prompt names a word and an operation, the completion is
# the answer; the operations are learnable from the prompt alone.
words=(apple river stone cloud green night music table paper light dream water)
for i in $(seq 0 239); do
  w=${words[$((i % 12))]}
  case $((i % 3)) in
    0) p="Repeat twice: $w" c=" $w $w" ;;
    1) p="Say the word: $w" c=" $w." ;;
    2) p="Shout: $w" c=" ${w^^}!" ;;
  esac
  echo "{\"prompt\": \"$p\\n\", \"completion\": \"$c\"}"
done > ex.jsonl
"$ZDATA" finetune --tokenizer "$TOK" --format prompt_completion --val-fraction 0.2 --out ft ex.jsonl > zdata.out \
  || { cat zdata.out; fail "zdata finetune failed"; finish; }
[ -f ft/train.mask ] && [ -f ft/val.mask ] && echo "ok: zdata finetune wrote train.mask and val.mask" \
  || fail "mask files missing"

# mask FILE N KIND: a loss mask of N entries, KIND zeros|ones|even|odd
# ([Note: loss mask file] in src/io/loss_mask.hpp).
mask() {
  perl -e 'my ($n, $k) = @ARGV; print "ZTLMASK\0", pack("l<l<q<", 1, 0, $n);
           print pack("C*", map { $k eq "ones" ? 1 : $k eq "zeros" ? 0 : $k eq "even" ? ($_ % 2 == 0 ? 1 : 0) : $_ % 2 } 0 .. $n - 1)' \
    "$2" "$3" > "$1"
}
ntok=$(( ($(stat -c %s ft/train.bin) - 1024) / 2 ))
for k in plain ones zeros even odd; do
  mkdir -p "m-$k"
  cp ft/train.bin "m-$k/train.bin"
  [ "$k" = plain ] || mask "m-$k/train.mask" "$ntok" "$k"
done

cat > c.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.95], "weight_decay": 0.0}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 4000, "allgather_bucket_size": 6000,
                       "stage3_param_persistence_threshold": 200, "stage3_prefetch_bucket_size": 40000},
 "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 1200},
 "data": {"train": "ft/train.bin", "val": "ft/val.bin"},
 "train": {"steps": 12, "eval_interval": 12, "eval_steps": 2}}
JSON

run() {  # run NAME NP settings...: metrics in NAME/metrics.jsonl, losses in NAME.loss
  local name=$1 np=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  run_np "$np" c.json --log-dir "$name" "${sets[@]}"
  if [ "$RC" != 0 ]; then fail "$name: run failed"; return 1; fi
  losses "$name/metrics.jsonl" > "$name.loss"
  grep '"step"' "$name/metrics.jsonl" | grep -o '"grad_norm":[^,}]*' | cut -d: -f2 > "$name.gnorm"
}

# ---- what a mask does, on hand-made masks over the same shard ----
for k in plain ones zeros even odd; do
  run "$k" 1 "data.train=\"m-$k/train.bin\"" train.steps=3 || true
done
if cmp -s plain.loss ones.loss && cmp -s plain.gnorm ones.gnorm; then
  echo "ok: an all-one mask gives the bits of no mask"
else
  fail "all-one mask differs from no mask: $(paste plain.loss ones.loss | tr '\n' ';')"
fi
if [ "$(sort -u zeros.gnorm)" = "0.0" ] && [ "$(sort -u zeros.loss)" = "null" ]; then
  echo "ok: an all-zero mask gives zero gradient and no loss"
else
  fail "all-zero mask: grad norms $(tr '\n' ' ' < zeros.gnorm), losses $(tr '\n' ' ' < zeros.loss)"
fi
zt=$(grep '"step"' zeros/metrics.jsonl | grep -o '"tokens_per_s":[^,}]*' | cut -d: -f2 | sort -u)
pt=$(field plain/metrics.jsonl tokens_per_s)
[ "$zt" = "0.0" ] && awk -v p="$pt" 'BEGIN { exit !(p > 0) }' && echo "ok: tok/s counts only unmasked targets (0 for an all-zero mask)" \
  || fail "tokens_per_s: all-zero mask '$zt', no mask '$pt'"
l=$(head -1 plain.loss) e=$(head -1 even.loss) o=$(head -1 odd.loss)
awk -v l="$l" -v e="$e" -v o="$o" 'BEGIN { d = (e + o) / 2 - l; if (d < 0) d = -d; exit !(d < 1e-6 * l && e != l && o != l) }' \
  && echo "ok: complementary masks: (even $e + odd $o) / 2 = unmasked $l" \
  || fail "complementary masks: (even $e + odd $o) / 2 != unmasked $l"

# ---- zdata finetune data under several layouts ----
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
falls() {  # falls NAME: the last loss is well below the first
  local f l
  f=$(head -1 "$1.loss"); l=$(tail -1 "$1.loss")
  awk -v f="$f" -v l="$l" 'BEGIN { exit !(l < f - 1.0) }' && echo "ok: $1: loss falls from $f to $l" \
    || fail "$1: loss does not fall: $f -> $l"
}
if run gpt-np1-z0 1; then
  falls gpt-np1-z0
  v=$(field gpt-np1-z0/metrics.jsonl val_loss)
  awk -v v="$v" 'BEGIN { exit !(v > 0 && v < 20) }' && echo "ok: masked val loss $v" || fail "val loss '$v'"
fi
run gpt-np2-z0 2 && close gpt-np2-z0 gpt-np1-z0
run gpt-np1-z3 1 zero_optimization.stage=3 && close gpt-np1-z3 gpt-np1-z0
run gpt-np2-z3 2 zero_optimization.stage=3 && close gpt-np2-z3 gpt-np1-z0
run gpt-np2-p2 2 pipeline.parallel_size=2 && close gpt-np2-p2 gpt-np1-z0

LLAMA=('model.arch="llama"' model.n_head=4 model.num_key_value_heads=2 model.intermediate_size=64)
if run llama-np1-z0 1 "${LLAMA[@]}"; then falls llama-np1-z0; fi
run llama-np2-z3 2 "${LLAMA[@]}" zero_optimization.stage=3 && close llama-np2-z3 llama-np1-z0

# ---- errors ----
echo '{"prompt": "x"}' > bad.jsonl
set +e
"$ZDATA" finetune --tokenizer "$TOK" --format prompt_completion --out bad ex.jsonl bad.jsonl > bad.out 2>&1
rc=$?
set -e
[ "$rc" = 1 ] && grep -q 'bad.jsonl:1: missing key "completion"' bad.out && echo "ok: a bad line names file and line" \
  || fail "bad line: rc $rc, $(cat bad.out)"
finish
