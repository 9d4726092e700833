#!/usr/bin/env bash
# Each class of bad input gives exit code 2 and a message that names the file,
# the JSON path and what was expected, printed once.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cfg() { echo "$1" > "$WORK/c.json"; }

cfg '{"train_batch_size": 8, "zero_optimization": {"stgae": 0}}'
expect_error unknown-key 2 "c.json: zero_optimization.stgae: unknown key.*did you mean 'stage'" c.json

cfg '{"train_batch_size": 8, "optimizr": {"type": "AdamW"}}'
expect_error unknown-top-level-key 2 "optimizr: unknown key.*optimizer" c.json

cfg '{"train_batch_size": 8, "train": {"steps": "ten"}}'
expect_error wrong-type 2 'c.json: train.steps: expected .*integer.*"ten"' c.json

cfg '{"train_batch_size": 8, "zero_optimization": {"stage": 7}}'
expect_error out-of-range 2 'c.json: zero_optimization.stage: expected .*0.*3.*7' c.json

cfg '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}'
expect_error inconsistent-batch 2 'train_batch_size \(32\).*4.*2.*2.*= 16' c.json

cfg '{"train_batch_size": 8, "data": {"train": "no/such/file.bin"}}'
expect_error missing-data-file 2 'no/such/file.bin' c.json

printf 'not a shard' > bad.bin
cfg '{"train_batch_size": 8, "data": {"train": "bad.bin"}}'
expect_error malformed-data-file 2 'bad.bin' c.json

cfg '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/dev/null"}, "offload_optimizer": {"device": "cpu"}}}'
expect_error param-nvme-path-a-device 2 'zero_optimization.offload_param.nvme_path = /dev/null is a character device' c.json

cfg '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}'
expect_error offload-with-wrong-stage 2 'c.json: zero_optimization.offload_param.device: "cpu" needs ZeRO stage 3.*found stage 2' c.json

cfg '{"train_batch_size": 8, "offload": {"delayed_update": true}}'
expect_error offload-section-without-offload 2 'c.json: offload.delayed_update: true needs zero_optimization.offload_optimizer.device' c.json

cfg '{"train_batch_size": 8,'
expect_error bad-json 2 'c.json' c.json

expect_error missing-config 2 'nonexistent.json' nonexistent.json

cfg '{"train_batch_size": 8}'
expect_error bad-override 2 'train.steps' c.json --set 'train.steps=-5'

# Data that trains or validates on repeated samples is legal but named once
# ([Note: data the run would use unevenly]); a comma list is split as the
# reader splits it (spaces trimmed, empty items skipped).
"$ZDATA" markov --out small --train-tokens 130 --val-tokens 130 > /dev/null
cfg '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "data": {"train": " small/train.bin,", "val": "small/val.bin"}, "train": {"steps": 2, "eval_interval": 2, "eval_steps": 2}}'
run_np 2 c.json --log-dir uneven
[ "$RC" = 0 ] && grep -q "warning: data.train: 2 sequences of 65 tokens, fewer than the global batch of 8: every step repeats sequences" "$WORK/out" \
  && grep -q "warning: data.val: 2 sequences of 65 tokens hold 0 validation batches of 8, but train.eval_steps is 2" "$WORK/out" \
  && [ "$(grep -c 'warning: data\.' "$WORK/out")" = 2 ] && echo "ok: small data named once, comma list trimmed" \
  || fail "small data: exit $RC, $(cat "$WORK/out")"
cfg '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "data": {"train": "small/train.bin", "val": "small/../small/train.bin"}, "train": {"steps": 1, "eval_interval": 1, "eval_steps": 1}}'
run_np 1 c.json --log-dir sameval
[ "$RC" = 0 ] && grep -q "warning: data.val's shard small/../small/train.bin is data.train's small/train.bin" "$WORK/out" \
  && echo "ok: validation on the training shard is named" || fail "val = train: exit $RC, $(cat "$WORK/out")"
finish
