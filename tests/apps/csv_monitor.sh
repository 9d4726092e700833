#!/usr/bin/env bash
# DeepSpeed's csv_monitor: with "enabled", rank 0 writes
# output_path/job_name/Train_Samples_{train_loss,lr,loss_scale}.csv, a
# "step,<name>" header then "samples,value" rows at the printed steps, equal
# to metrics.jsonl; a resumed run appends to the same files (no second
# header); job_name with '/' is an error naming the key; off by default.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > m.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "fp16": {"enabled": true, "initial_scale_power": 8},
 "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 64},
 "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "j"},
 "checkpoint": {"dir": "ck"}, "train": {"steps": 4, "eval_interval": 0}}
JSON
run_np 2 m.json --log-dir m
f=csv/j/Train_Samples_train_loss.csv
tail -n +2 "$f" | cut -d, -f2 > x
losses m/metrics.jsonl > y
if [ "$RC" = 0 ] && [ "$(head -1 "$f")" = "step,train_loss" ] && [ "$(tail -n +2 "$f" | cut -d, -f1 | tr '\n' ' ')" = "8 16 24 32 " ] &&
   [ -s x ] && awk 'NR == FNR { a[FNR] = $1; next } { d = a[FNR] - $1; if (d < 0) d = -d; if (d > 1e-6 * ($1 < 0 ? -$1 : $1)) bad = 1 } END { exit bad }' x y &&
   [ "$(wc -l < x)" = 4 ] && [ "$(head -1 csv/j/Train_Samples_lr.csv)" = "step,lr" ] &&
   [ "$(head -1 csv/j/Train_Samples_loss_scale.csv)" = "step,loss_scale" ]; then
  echo "ok: csv_monitor writes DeepSpeed's files with the losses of metrics.jsonl"
else
  fail "csv_monitor files: exit $RC; $(cat "$f" 2>/dev/null | tr '\n' ' ') vs $(tr '\n' ' ' < y)"
fi
run_np 2 m.json --log-dir m --resume auto --steps 6
if [ "$RC" = 0 ] && [ "$(grep -c '^step,' "$f")" = 1 ] && [ "$(tail -n +2 "$f" | cut -d, -f1 | tr '\n' ' ')" = "8 16 24 32 40 48 " ]; then
  echo "ok: a resumed run appends to the csv files"
else
  fail "csv_monitor after resume: exit $RC; $(tr '\n' ' ' < "$f")"
fi
expect_error "csv_monitor.job_name with '/'" 2 "csv_monitor.job_name" m.json --set 'csv_monitor.job_name="a/b"'
rm -rf csv
run_np 1 m.json --log-dir n --set csv_monitor.enabled=false --set checkpoint.dir='"ck2"' 
if [ "$RC" = 0 ] && [ ! -e csv ]; then echo "ok: csv_monitor disabled writes nothing"; else fail "csv_monitor disabled"; fi
finish
