"""transformers.pipeline("text-generation") on a `zckpt export` directory.

usage: hf_pipeline.py corpus OUT_DIR
           a byte-level BPE tokenizer.json trained by the `tokenizers` package
           (vocabulary 300, <|endoftext|> = 0) and train.bin / val.bin token
           shards (llm.c format, uint16) of a small repetitive text, for a
           ztrain run that names the tokenizer (data.tokenizer)
       hf_pipeline.py generate EXPORT_DIR
           loads the export with pipeline("text-generation") (AutoTokenizer
           from the exported tokenizer files, BOS/EOS from config.json and
           generation_config.json) and generates greedily from a prompt of
           that text; exit 0 when the continuation is the text's own

Exit 77 when transformers, torch or tokenizers is missing (CTest's skip code).
"""
import struct
import sys

try:
    import torch  # noqa: F401
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, pipeline
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

TEXT = ("the quick brown fox jumps over the lazy dog. " * 3 + "a stitch in time saves nine. ") * 200


def corpus(out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT], tr)
    tok.save(f"{out}/tokenizer.json")
    ids = (tok.encode(TEXT).ids + [tok.token_to_id("<|endoftext|>")]) * 4
    for name, part in (("train.bin", ids), ("val.bin", ids[: len(ids) // 4])):
        with open(f"{out}/{name}", "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, len(part), *([0] * 253)))
            f.write(struct.pack(f"<{len(part)}H", *part))
    print(f"tokenizer vocabulary {tok.get_vocab_size()}, {len(ids)} tokens")
    return 0


def generate(export_dir):
    tok = AutoTokenizer.from_pretrained(export_dir)
    problems = []
    if tok.eos_token_id != 0:
        problems.append(f"AutoTokenizer's eos_token_id {tok.eos_token_id}, expected 0 (<|endoftext|>)")
    pipe = pipeline("text-generation", model=export_dir, device="cpu")
    if pipe.model.generation_config.eos_token_id != 0:
        problems.append(f"generation_config eos_token_id {pipe.model.generation_config.eos_token_id}")
    prompt = "the quick brown"
    out = pipe(prompt, max_new_tokens=8, do_sample=False)[0]["generated_text"]
    print(f"pipeline: {prompt!r} -> {out!r}")
    if not out.startswith(prompt) or len(out) <= len(prompt):
        problems.append("no continuation")
    elif not TEXT.startswith(out.strip()[: len("the quick brown fox")]):
        problems.append("the continuation is not the training text's")
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    cmd, arg = sys.argv[1], sys.argv[2]
    sys.exit(corpus(arg) if cmd == "corpus" else generate(arg))
