#!/usr/bin/env bash
# Hugging Face import, model.init_from and export, against the references
# that transformers computed (tests/interop/make_hf_refs.py wrote
# tests/interop/refs/: tiny GPT-2 in fp32 and bf16; Llama with GQA and
# Llama-3 rope scaling in the older config form; Llama with one KV head, a
# tied head, in 11 shards, in the newer rope_parameters form; Llama in bf16):
#  - zckpt import, then zckpt logits: within 1e-4 (relative to the largest
#    logit) of transformers' fp32 logits, for every reference;
#  - export -> import round trip: the same logits again (GPT-2 and Llama);
#    config.json's BOS/EOS and generation_config.json; an export of a run
#    without a tokenizer says so;
#  - errors of zckpt import (unknown model_type, a truncated safetensors file,
#    an existing step_0);
#  - model.init_from: runs that change no weight (lr 1e-30) save a checkpoint
#    whose logits are transformers' again, on np 1 and 2, ZeRO 0-3 and a
#    pipeline split (each rank read only its slices, the transposes and
#    prefixes right), and their first losses agree over the layouts;
#    --resume auto starts from init_from only when it finds no checkpoint; a fine-tuning run from the Llama reference gives
#    identical loss bits over ZeRO 0-3 on np 2 and from the HF directory or the
#    imported checkpoint; wrong model and missing directory are clear errors,
#    and --resume refuses an imported checkpoint (it has no optimizer state).
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
REFS="$SRC/tests/interop/refs"

expect_logits() {  # expect_logits STEP_DIR REF NAME
  set +e
  "$ZCKPT" logits "$1" --tokens-file "$REFS/$2/tokens.txt" --out l.npy --expect "$REFS/$2/logits.npy" > lo 2>&1
  local rc=$?
  set -e
  if [ $rc = 0 ] && grep -q "^match:" lo; then echo "ok: $3: $(grep '^match:' lo)"
  else cp lo out; fail "$3: logits (rc $rc)"; fi
}

for m in gpt2 gpt2_bf16 llama_gqa llama_mqa_shards llama_bf16; do
  if "$ZCKPT" import "$REFS/$m" --out imp_$m > out 2>&1 && "$ZCKPT" verify imp_$m/step_0 > /dev/null 2>&1; then
    expect_logits imp_$m/step_0 $m "import $m"
  else
    fail "zckpt import $m"
  fi
done

# The comparison can fail: another model's logits do not match.
if "$ZCKPT" logits imp_llama_bf16/step_0 --tokens-file "$REFS/llama_bf16/tokens.txt" --out l.npy \
     --expect "$REFS/llama_mqa_shards/logits.npy" > out 2>&1; then fail "--expect accepted another model's logits"
elif grep -q "^MISMATCH" out; then echo "ok: another model's logits are a mismatch"; else fail "--expect: no MISMATCH line"; fi

# Export -> import round trip; BOS/EOS from the imported model's config.json.
for m in gpt2 llama_gqa llama_mqa_shards; do
  if "$ZCKPT" export imp_$m/step_0 --out ex_$m > exo 2>&1 && "$ZCKPT" import ex_$m --out re_$m > out 2>&1; then
    expect_logits re_$m/step_0 $m "export -> import $m"
  else
    cp exo out; fail "export/import round trip $m"
  fi
done
if grep -q '"eos_token_id": 2' ex_llama_gqa/config.json && grep -q '"eos_token_id": 2' ex_llama_gqa/generation_config.json &&
   grep -q '"architectures": \[' ex_llama_gqa/config.json && grep -q LlamaForCausalLM ex_llama_gqa/config.json &&
   grep -q '"rope_type": "llama3"' ex_llama_gqa/config.json && grep -q '"eos_token_id": 95' ex_gpt2/config.json; then
  echo "ok: exports carry the BOS/EOS ids (config.json, generation_config.json) and the Llama config"
else
  fail "export config.json / generation_config.json"
fi

# Import errors.
cp -r "$REFS/gpt2" bad1 && sed -i 's/"model_type": "gpt2"/"model_type": "gptj"/' bad1/config.json
cp -r "$REFS/gpt2" bad2 && head -c 20000 "$REFS/gpt2/model.safetensors" > bad2/model.safetensors
for c in "bad1|model_type: 'gptj' is not supported" "bad2|out of range" "$REFS/gpt2|step_0 already exists"; do
  dir=${c%%|*} pat=${c#*|}
  out_dir=ebad; [ "$dir" = "$REFS/gpt2" ] && out_dir=imp_gpt2
  if "$ZCKPT" import "$dir" --out $out_dir > out 2>&1; then fail "import $dir accepted"
  elif grep -q -- "$pat" out; then echo "ok: import error: $(head -1 out)"; else fail "import $dir: expected /$pat/"; fi
done

# model.init_from: no weight changes (lr 1e-30), the saved weights are transformers' model.
cat > g.json <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-30, "weight_decay": 0.0}},
 "model": {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab_size": 96, "init_from": "$REFS/gpt2"},
 "checkpoint": {"dir": "ck", "interval": 1},
 "train": {"steps": 1, "eval_interval": 0}}
JSON
cat > l.json <<JSON
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-30, "weight_decay": 0.0}},
 "model": {"arch": "llama", "n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 64, "vocab_size": 128,
           "intermediate_size": 96, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 5000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 16},
           "tie_word_embeddings": false, "init_from": "$REFS/llama_gqa"},
 "checkpoint": {"dir": "ck", "interval": 1},
 "train": {"steps": 1, "eval_interval": 0}}
JSON
rm -f first_gpt2 first_llama_gqa first_llama_mqa_shards
mqa="--set model.num_key_value_heads=1 --set model.tie_word_embeddings=true --set model.init_from=\"$REFS/llama_mqa_shards\""
for c in "g.json|1|0|gpt2" "g.json|2|3|gpt2" "g.json|2|1 --set pipeline.parallel_size=2|gpt2" "l.json|1|0|llama_gqa" \
         "l.json|2|3|llama_gqa" "l.json|2|2 --set model.init_from=\"imp_llama_gqa\"|llama_gqa" \
         "l.json|2|3 --set pipeline.parallel_size=2|llama_gqa" \
         "l.json|2|1 --set pipeline.parallel_size=2 $mqa|llama_mqa_shards" "l.json|1|0 $mqa|llama_mqa_shards"; do
  IFS='|' read -r cfg np rest ref <<< "$c"
  rm -rf ck
  # shellcheck disable=SC2086
  run_np "$np" "$cfg" --log-dir li --set zero_optimization.stage=$rest
  if [ "$RC" = 0 ] && grep -q "model.init_from: weights from" out; then
    expect_logits ck/step_1 "$ref" "init_from $ref, np $np, stage $rest: the saved weights"
    # The first loss, before any update, is the same model's on the same
    # data whatever the layout (the last pipeline stage's copy of the tied
    # embedding included).
    losses li/metrics.jsonl | head -1 >> first_$ref
  else
    fail "init_from run $cfg np $np stage $rest (rc $RC)"
  fi
done

# --resume auto with no checkpoint yet starts from init_from; with one, resumes it.
rm -rf ck
run_np 1 l.json --log-dir ra --resume auto
if [ "$RC" = 0 ] && grep -q "model.init_from: weights from" out; then echo "ok: --resume auto without a checkpoint starts from init_from"
else fail "--resume auto without a checkpoint: init_from not used"; fi
run_np 1 l.json --log-dir rb --resume auto --set train.steps=2
if [ "$RC" = 0 ] && grep -q "resumed from ck/step_1" out && ! grep -q "model.init_from: weights from" out; then
  echo "ok: --resume auto with a checkpoint resumes it, not init_from"
else fail "--resume auto with a checkpoint"; fi

for ref in gpt2 llama_gqa llama_mqa_shards; do
  if [ "$(wc -l < first_$ref)" -ge 2 ] && awk 'NR == 1 { a = $1 } { d = $1 - a; if (d < 0) d = -d; if (d > 1e-6 * a) bad = 1 } END { exit bad }' first_$ref; then
    echo "ok: init_from $ref: the first loss agrees over the layouts to 1e-6 ($(tr '\n' ' ' < first_$ref))"
  else
    fail "init_from $ref: first losses differ over layouts: $(tr '\n' ' ' < first_$ref)"
  fi
done

# Fine-tuning from the Llama reference: identical loss bits over ZeRO 0-3
# (np 2), and from the imported checkpoint as from the HF directory. One
# micro-batch per rank and step: with accumulation, stage 0 sums a rank's
# micro-batches before the all-reduce and stages 2-3 after each
# reduce-scatter, another order of the same additions (and the gradient
# norm's partial sums follow the partition), so only the losses are compared.
ft=(--set optimizer.params.lr=0.003 --set optimizer.params.weight_decay=0.1 --set train.steps=4 --set checkpoint=null
    --set train_micro_batch_size_per_gpu=4)
lossbits() { grep '"step"' "$1/metrics.jsonl" | grep -o '"loss":[^,}]*\|"val_loss":[^,}]*'; }
for stage in 0 1 2 3; do
  run_np 2 l.json --log-dir ft$stage "${ft[@]}" --set zero_optimization.stage=$stage
  [ "$RC" = 0 ] || fail "fine-tuning run, stage $stage (rc $RC)"
  lossbits ft$stage > bits$stage
done
for stage in 1 2 3; do
  if [ -s bits0 ] && cmp -s bits0 bits$stage; then echo "ok: fine-tuning from HF: ZeRO-$stage loss bits equal ZeRO-0's"
  else fail "fine-tuning: ZeRO-$stage bits differ: $(cat bits$stage) vs $(cat bits0)"; fi
done
for stage in 0 3; do
  run_np 1 l.json --log-dir ft1_$stage "${ft[@]}" --set zero_optimization.stage=$stage --set train_micro_batch_size_per_gpu=8
  lossbits ft1_$stage > bits1_$stage
done
if [ -s bits1_0 ] && cmp -s bits1_0 bits1_3; then echo "ok: fine-tuning from HF on np 1: ZeRO-3 loss bits equal ZeRO-0's"
else fail "fine-tuning np 1: ZeRO-3 bits differ from ZeRO-0's"; fi
run_np 2 l.json --log-dir ftc "${ft[@]}" --set model.init_from='"imp_llama_gqa"'
lossbits ftc > bitsc
if [ -s bitsc ] && cmp -s bits0 bitsc; then echo "ok: init_from the imported checkpoint gives the HF directory's bits"
else fail "init_from checkpoint vs HF directory: $(cat bitsc) vs $(cat bits0)"; fi
run_np 2 l.json --log-dir ftr "${ft[@]}" --set model.init_from=null
lossbits ftr > bitsr
first() { losses "$1/metrics.jsonl" | head -1; }
if [ -s bitsr ] && ! cmp -s bits0 bitsr && awk -v a="$(first ft0)" -v b="$(first ftr)" 'BEGIN { exit !(a > b + 0.05) }'; then
  echo "ok: the first loss from the imported weights ($(first ft0)) is not a random start's ($(first ftr))"
else fail "init_from made no difference"; fi

expect_error "init_from a model of other sizes" 2 "has 2 layers, this run's model \(llama\) has 3" l.json --set model.n_layer=3
expect_error "init_from a missing directory" 2 "model.init_from: /.*/nowhere: no such directory" l.json --set model.init_from='"nowhere"'
expect_error "--resume of an imported checkpoint" 2 "made by zckpt import: .* start from it with model.init_from" \
  l.json --resume imp_llama_gqa/step_0 --set model.init_from=null
expect_error "model.init_from \"\"" 2 "model.init_from: expected a directory" l.json --set model.init_from='""'
expect_error "data.tokenizer with the built-in corpus" 2 "data.tokenizer: cannot be given together with data.embedded" \
  l.json --set data.embedded=true --set data.tokenizer='"t.json"'
expect_error "data.tokenizer missing" 2 "data.tokenizer: .*nothing.json" \
  l.json --set data.train='"'"$REFS"'/gpt2/config.json"' --set data.tokenizer='"nothing.json"' 
finish
