#!/usr/bin/env bash
# Llama 3's vocabulary end to end: a uint32 token shard (llm.c's "llama-3"
# header) with ids above 65535 trains a tiny model of vocab_size 128,256 on
# the CPU (embedding and classifier over the whole vocabulary): the first
# loss is ln(128256) = 11.76 as for any fresh model, and it falls as the
# model learns the corpus, a cycle of 64 ids between 100000 and 128255. The
# same data with vocab_size 65536 is refused, naming the file and the token.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"

# shard FILE N: N ids cycling through 64 values in [100000, 128255], as
# magic 20240801, version 7, count N, 253 zeros, then uint32 ids (perl, which
# every Debian has, writes the binary).
shard() {
  perl -e 'my ($f, $n) = @ARGV; open(my $h, ">:raw", $f) or die;
           print $h pack("l<256", 20240801, 7, $n, (0) x 253);
           print $h pack("L<*", map { 100000 + ($_ % 64) * 441 } 0 .. $n - 1); close($h) or die;' "$1" "$2"
}
shard train.bin 20000
shard val.bin 2000
"$ZDATA" inspect train.bin > inspect.out
grep -q "magic: 20240801, version: 7 (uint32 tokens)" inspect.out || fail "zdata inspect: $(cat inspect.out)"
grep -q "max token: 127783" inspect.out || fail "zdata inspect max: $(cat inspect.out)"

# Small batches: each token's logits span 128,256 classes on the CPU.
small="--set train_batch_size=8 --set train_micro_batch_size_per_gpu=8 --set model.seq_len=16"
run_np 1 "$SRC/data/configs/tiny.json" --steps 30 --log-dir run --set model.vocab_size=128256 $small \
  --set data.train=train.bin --set data.val=val.bin --set train.eval_interval=30 --set train.eval_steps=1 \
  --set steps_per_print=5 --set scheduler.params.total_num_steps=30 --set scheduler.params.warmup_num_steps=5
[ "$RC" = 0 ] || fail "training with vocab_size 128256 failed"
first=$(losses run/metrics.jsonl | head -1)
last=$(losses run/metrics.jsonl | tail -1)
echo "vocab 128256: first loss $first, last loss $last"
awk -v f="$first" 'BEGIN { exit !(f > 11.5 && f < 12.1) }' && echo "ok: first loss is ln(128256)" \
  || fail "first loss $first is not ln(128256) = 11.76"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f - 2) }' && echo "ok: the loss falls" \
  || fail "loss did not fall: $first -> $last"

expect_error vocab_too_small 2 "train.bin.*token 1[0-9]{5}.*vocab" "$SRC/data/configs/tiny.json" --steps 2 $small \
  --set train_batch_size=16 --set model.vocab_size=65536 --set data.train=train.bin --set data.val=val.bin
finish
