#!/usr/bin/env python3
"""Makes the tokenizer references of tests/io/test_tokenizers.cpp.

    pip install tokenizers sentencepiece
    python3 tests/io/make_tokenizer_refs.py          # rewrites tests/io/data/tok_*
    python3 tests/io/make_tokenizer_refs.py --check  # only compares (exit 1 on a difference)

(a) trains three small tokenizers on the repository's own text (README.md and
    docs/*.md, plus the sample below so that its scripts get a few merges):
      tok_gpt2.json    byte-level BPE, GPT-2's pre-tokeniser (ByteLevel with
                       its regex), <|endoftext|>
      tok_llama3.json  byte-level BPE, Llama 3's Split pattern + ByteLevel,
                       ignore_merges, Llama 3's special tokens, a
                       non-special added token <custom>, and the
                       <|begin_of_text|> $A template
      tok_sp.model     SentencePiece BPE with Llama 2's options (byte
                       fallback, split digits, dummy prefix, identity
                       normalisation, whitespace kept)
(b) writes tests/io/data/tok_expected.json: for the multilingual sample
    tests/io/data/tokenizer_sample.txt (whole, and each of its lines) the ids
    of each tokenizer as the Python packages give them.

The trained files are committed; the C++ test loads them, so a retrained
tokenizer only needs new expected ids. --check recomputes the ids from the
committed files and compares them with the committed expected ids: the live
comparison the C++ test runs when the packages are installed
(test_tokenizers.cpp runs this script with --check).
"""
import argparse
import glob
import io
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(HERE, "data")
SAMPLE = os.path.join(DATA, "tokenizer_sample.txt")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def training_text():
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    texts = [open(f, encoding="utf-8").read() for f in files]
    texts.append(open(SAMPLE, encoding="utf-8", newline="").read())
    return texts


def train_gpt2(texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def train_llama3(texts):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=LLAMA3_SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens(["<custom>"])  # a non-special added token
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def train_sp(texts, prefix):
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter("\n".join(texts).split("\n")), model_prefix=prefix, model_type="bpe",
        vocab_size=800, byte_fallback=True, split_digits=True, add_dummy_prefix=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        character_coverage=0.9995, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
        minloglevel=2)


def sample_texts():
    whole = open(SAMPLE, encoding="utf-8", newline="").read()
    return [whole] + whole.split("\n")


def expected_ids():
    from tokenizers import Tokenizer
    import sentencepiece as spm
    gpt2 = Tokenizer.from_file(os.path.join(DATA, "tok_gpt2.json"))
    llama3 = Tokenizer.from_file(os.path.join(DATA, "tok_llama3.json"))
    llama3_split = Tokenizer.from_file(os.path.join(DATA, "tok_llama3.json"))
    llama3_split.encode_special_tokens = True
    # GPT-2's file with ByteLevel add_prefix_space = true (a space before each
    # piece between added tokens that lacks one; test_tokenizers.cpp makes the
    # same edit).
    j = json.load(open(os.path.join(DATA, "tok_gpt2.json"), encoding="utf-8"))
    j["pre_tokenizer"]["add_prefix_space"] = True
    gpt2_prefix = Tokenizer.from_str(json.dumps(j))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(DATA, "tok_sp.model"))
    texts = sample_texts()
    out = {"sample": "tokenizer_sample.txt", "texts": texts, "cases": {}}
    out["cases"]["gpt2"] = [gpt2.encode(t, add_special_tokens=False).ids for t in texts]
    out["cases"]["gpt2_prefix_space"] = [gpt2_prefix.encode(t, add_special_tokens=False).ids for t in texts]
    out["cases"]["llama3"] = [llama3.encode(t, add_special_tokens=False).ids for t in texts]
    out["cases"]["llama3_template"] = [llama3.encode(t, add_special_tokens=True).ids for t in texts]
    out["cases"]["llama3_split_special"] = [llama3_split.encode(t, add_special_tokens=False).ids for t in texts]
    out["cases"]["sp"] = [sp.encode(t) for t in texts]
    out["vocab_size"] = {"gpt2": gpt2.get_vocab_size(), "llama3": llama3.get_vocab_size(),
                         "sp": sp.get_piece_size()}
    out["bos"] = {"llama3": llama3.token_to_id("<|begin_of_text|>"), "sp": sp.bos_id()}
    out["eos"] = {"gpt2": gpt2.token_to_id("<|endoftext|>"), "llama3": llama3.token_to_id("<|end_of_text|>"),
                  "sp": sp.eos_id()}
    return out


def dump(obj):
    # One line per id list keeps the file diffable and small.
    buf = io.StringIO()
    buf.write("{\n")
    items = list(obj.items())
    for k, (key, val) in enumerate(items):
        sep = "," if k + 1 < len(items) else ""
        if key == "cases":
            buf.write('  "cases": {\n')
            names = list(val.items())
            for n, (name, lists) in enumerate(names):
                buf.write(f'    {json.dumps(name)}: [\n')
                buf.write(",\n".join("      " + json.dumps(ids) for ids in lists))
                buf.write("\n    ]" + ("," if n + 1 < len(names) else "") + "\n")
            buf.write("  }" + sep + "\n")
        else:
            buf.write(f"  {json.dumps(key)}: {json.dumps(val, ensure_ascii=False)}{sep}\n")
    buf.write("}\n")
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare with the committed expected ids only")
    args = ap.parse_args()
    expected_path = os.path.join(DATA, "tok_expected.json")
    if args.check:
        got = expected_ids()
        want = json.load(open(expected_path, encoding="utf-8"))
        if got != json.loads(dump(got)) or json.loads(dump(got)) != want:
            for name in sorted(set(want["cases"]) ^ set(got["cases"])):
                print(f"case {name} is only in one of the two")
            for name in set(want["cases"]) & set(got["cases"]):
                for i, (a, b) in enumerate(zip(want["cases"][name], got["cases"][name])):
                    if a != b:
                        print(f"{name} text {i}: committed {a} != live {b}")
            print("make_tokenizer_refs: the live packages disagree with tok_expected.json")
            return 1
        print("make_tokenizer_refs: live ids equal tok_expected.json")
        return 0
    texts = training_text()
    train_gpt2(texts).save(os.path.join(DATA, "tok_gpt2.json"), pretty=False)
    train_llama3(texts).save(os.path.join(DATA, "tok_llama3.json"), pretty=False)
    train_sp(texts, os.path.join(DATA, "tok_sp"))
    os.remove(os.path.join(DATA, "tok_sp.vocab"))
    with open(expected_path, "w", encoding="utf-8") as f:
        f.write(dump(expected_ids()))
    for name in ["tok_gpt2.json", "tok_llama3.json", "tok_sp.model", "tok_expected.json"]:
        print(f"{name}: {os.path.getsize(os.path.join(DATA, name))} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
