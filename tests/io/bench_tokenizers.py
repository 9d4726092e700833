#!/usr/bin/env python3
"""Throughput of the `tokenizers` / `sentencepiece` packages on the documents
`zdata tokenize` sees, and (optionally) the equality of their ids with a shard
zdata wrote. docs/data.md reports the figures.

    python3 tests/io/bench_tokenizers.py --tokenizer T [--docs file|line] [--compare DIR/train.bin] FILE...

The documents are the files (--docs file) or their non-empty lines (--docs
line), as zdata's --docs; ids are encoded without BOS/EOS, so the comparison
is with a shard made with --bos none --eos none --val-fraction 0.
tokenizers runs encode_batch_fast (Rust threads, RAYON_NUM_THREADS); sentencepiece
runs encode on a list (its num_threads).
"""
import argparse
import os
import sys
import time

import numpy as np


def read_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        dtype = {(20240520, 1): np.uint16, (20240801, 7): np.uint32}[(int(header[0]), int(header[1]))]
        return np.frombuffer(f.read(), dtype=dtype)[: header[2]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--docs", choices=["file", "line"], default="file")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--compare")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    texts = [open(f, encoding="utf-8", newline="").read() for f in a.files]
    if a.docs == "line":
        texts = [line for t in texts for line in t.split("\n") if line]
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    if a.tokenizer.endswith(".json"):
        os.environ["RAYON_NUM_THREADS"] = str(a.threads)
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(a.tokenizer)
        # encode_batch_fast (tokenizers >= 0.20) skips the offsets zdata has
        # no use for; only the call is timed, not the Python lists of ids.
        fast = hasattr(tok, "encode_batch_fast")
        encode = tok.encode_batch_fast if fast else tok.encode_batch
        t0 = time.perf_counter()
        encodings = encode(texts, add_special_tokens=False)
        secs = time.perf_counter() - t0
        ids = [e.ids for e in encodings]
        what = "tokenizers " + ("encode_batch_fast" if fast else "encode_batch")
    else:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=a.tokenizer, num_threads=a.threads)
        t0 = time.perf_counter()
        ids = sp.encode(texts)
        secs = time.perf_counter() - t0
        what = "sentencepiece encode"
    n = sum(len(i) for i in ids)
    print(f"{what}: {nbytes / 1e6:.2f} MB in {secs:.3f} s: {nbytes / 1e6 / secs:.2f} MB/s, "
          f"{n / secs:.0f} tokens/s on {a.threads} threads")
    if a.compare:
        flat = np.fromiter((x for d in ids for x in d), dtype=np.int64, count=n)
        got = read_shard(a.compare).astype(np.int64)
        if got.shape != flat.shape or not np.array_equal(got, flat):
            bad = next((i for i in range(min(len(got), len(flat))) if got[i] != flat[i]), min(len(got), len(flat)))
            print(f"DIFFERENT: {a.compare} has {len(got)} ids, the package {len(flat)}; first difference at {bad}")
            return 1
        print(f"identical: {a.compare} holds the same {n} ids")
    return 0


if __name__ == "__main__":
    sys.exit(main())
