# Interoperability with Hugging Face transformers: a trained checkpoint,
# exported by `zckpt export` (f32 and bf16 safetensors), loads in
# GPT2LMHeadModel and gives the logits `zckpt logits` computes from the same
# checkpoint (tests/interop/hf_logits.py states the tolerances); the same for
# a trained Llama (GQA, llama3 rope scaling) in LlamaForCausalLM; and a run
# that names its tokenizer (a tokenizer.json trained by the `tokenizers`
# package) exports a directory that transformers.pipeline("text-generation")
# loads and generates the training text from (tests/interop/hf_pipeline.py).
# The references that CI checks without transformers are tests/apps/hf_import.sh's.
# `zckpt logits` itself is checked against the training head: the mean
# next-token loss from its logits equals the head's to 1e-6 relative.
# Exits 77 (skipped) when python3 with torch, transformers and numpy is
# missing; the `zckpt logits` check runs either way first.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > c.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 10,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3},
 "model": {"n_layer": 3, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab_size": 96},
 "checkpoint": {"dir": "ck", "interval": 40},
 "train": {"steps": 40, "eval_interval": 0}}
JSON
run_np 2 c.json --log-dir logs
[ "$RC" = 0 ] || { fail "training run exited $RC"; finish; }
# Four sequences of seq_len tokens (every position embedding is used).
awk 'BEGIN { srand(7); for (b = 0; b < 4; ++b) { s = ""; for (t = 0; t < 32; ++t) s = s (t ? "," : "") int(rand() * 96); print s } }' > tokens.txt

set +e
"$ZCKPT" logits ck/step_40 --tokens-file tokens.txt --out zt.npy > logits.out 2>&1
rc=$?
set -e
if [ $rc != 0 ] || ! grep -q "wrote logits (4, 32, 96)" logits.out; then
  cp logits.out out
  fail "zckpt logits (rc $rc)"
else
  read -r a b < <(sed -n 's/.*loss from logits \([^,]*\), from the training head \([^ ]*\).*/\1 \2/p' logits.out)
  if awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-6 * a) }'; then
    echo "ok: zckpt logits: next-token loss from its logits $a equals the training head's $b"
  else
    cp logits.out out
    fail "zckpt logits: loss from logits $a vs training head $b"
  fi
fi
for bad in "--tokens 1,2,96" "--tokens 1,2;3"; do
  # shellcheck disable=SC2086
  if "$ZCKPT" logits ck/step_40 $bad --out bad.npy > out 2>&1; then fail "zckpt logits $bad accepted"
  elif grep -q -E "outside the vocabulary|all must be equal" out; then echo "ok: zckpt logits $bad rejected: $(head -1 out)"
  else fail "zckpt logits $bad: unclear message"; fi
done

if ! python3 -c "import numpy, torch, transformers" > /dev/null 2>&1; then
  echo "skip: python3 with numpy, torch and transformers is not installed (the comparison with Hugging Face needs them)"
  [ "$FAILS" -ne 0 ] && finish
  exit 77
fi
for dt in f32 bf16; do
  "$ZCKPT" export ck/step_40 --out hf_$dt --dtype $dt > out 2>&1 || { fail "zckpt export --dtype $dt"; continue; }
  if python3 "$SRC/tests/interop/hf_logits.py" hf_$dt zt.npy tokens.txt $dt > out 2>&1; then
    echo "ok: Hugging Face GPT2LMHeadModel on the $dt export: $(grep "^$dt:" out)"
  else
    fail "Hugging Face comparison, $dt export"
  fi
done

# A Llama: trained, exported, loaded by LlamaForCausalLM.
cat > l.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 10,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 2},
 "model": {"arch": "llama", "n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab_size": 96,
           "intermediate_size": 96, "num_key_value_heads": 2, "rope_theta": 5000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 16}},
 "checkpoint": {"dir": "ckl", "interval": 20},
 "train": {"steps": 20, "eval_interval": 0}}
JSON
run_np 2 l.json --log-dir llogs
if [ "$RC" = 0 ] && "$ZCKPT" logits ckl/step_20 --tokens-file tokens.txt --out ztl.npy > out 2>&1 &&
   "$ZCKPT" export ckl/step_20 --out hf_llama > out 2>&1 &&
   python3 "$SRC/tests/interop/hf_logits.py" hf_llama ztl.npy tokens.txt f32 > out 2>&1; then
  echo "ok: Hugging Face LlamaForCausalLM on the Llama export: $(grep "^f32:" out)"
else
  fail "Llama export in LlamaForCausalLM"
fi

# pipeline("text-generation") on the export of a run that names its tokenizer.
mkdir -p tok
if python3 "$SRC/tests/interop/hf_pipeline.py" corpus tok > out 2>&1; then
  cat > t.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 10,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "model": {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab_size": 320},
 "data": {"train": "tok/train.bin", "val": "tok/val.bin", "tokenizer": "tok/tokenizer.json"},
 "checkpoint": {"dir": "ckt", "interval": 40},
 "train": {"steps": 40, "eval_interval": 0}}
JSON
  run_np 1 t.json --log-dir tlogs
  if [ "$RC" = 0 ] && "$ZCKPT" export ckt/step_40 --out hf_tok > exo 2>&1 && grep -q "wrote tokenizer.json" exo &&
     python3 "$SRC/tests/interop/hf_pipeline.py" generate hf_tok > out 2>&1; then
    echo "ok: $(grep '^pipeline:' out)"
  else
    fail "pipeline(\"text-generation\") on an export with the run's tokenizer"
  fi
else
  fail "making the tokenizer corpus"
fi
# Without a tokenizer (the built-in corpus), the export says so.
"$ZCKPT" export ck/step_40 --out hf_none > out 2>&1 || fail "export without a tokenizer"
if grep -q "tokenizer: none written" out && [ ! -e hf_none/tokenizer.json ] && grep -q '"eos_token_id": null' hf_none/config.json; then
  echo "ok: an export without a tokenizer says so and writes none"
else
  fail "export without a tokenizer: no note, or files written"
fi
finish
