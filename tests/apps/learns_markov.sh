#!/usr/bin/env bash
# A shorter version of the default run: the shipped tiny config, on a fresh
# copy of the Markov corpus, under mpirun -np 2, reaches a validation loss
# within 10% of the source's entropy rate (the lowest loss any model can have),
# starting far above it.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
"$ZDATA" markov --out data/markov > zdata.out
H=$(grep -o '"entropy_nats": *[0-9.]*' data/markov/entropy.json | grep -o '[0-9.]*$')
run_np 2 "$SRC/data/configs/tiny.json" --steps 200 --log-dir run \
  --set scheduler.params.total_num_steps=200 --set train.eval_interval=50
[ "$RC" = 0 ] || fail "training failed"
first=$(losses run/metrics.jsonl | head -1)
val=$(field run/metrics.jsonl val_loss)
echo "entropy $H nats; first loss $first; final val loss $val"
awk -v h="$H" -v f="$first" 'BEGIN { exit !(f > 1.5 * h) }' || fail "initial loss $first is not far above the entropy $H"
awk -v h="$H" -v v="$val" 'BEGIN { exit !(v < 1.10 * h && v > 0.98 * h) }' \
  && echo "ok: val loss $val within 10% of entropy $H" || fail "val loss $val not within 10% of entropy $H"
finish
