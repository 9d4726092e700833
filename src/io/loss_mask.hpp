// Loss masks: which targets of a token shard count in the loss.
//
// [Note: loss mask file] Fine-tuning data (zdata finetune) comes as a token
// shard X.bin plus a companion X.mask beside it (mask_path_for). Its format:
//
//   char  magic[8]   "ZTLMASK\0"
//   int32 version    1 or 2 (2 is written; both are read)
//   int32 zero       reserved, 0
//   int64 count      number of entries N, equal to the shard's token count
//   uint8 mask[N]    bit 0 (kMaskCounts): token i is a target that counts
//                    in the loss (a completion / assistant token, or the
//                    EOS that ends one); clear: it does not (prompt,
//                    template, BOS tokens).
//                    bit 1 (kMaskExampleStart), version 2 only: token i is
//                    the first token of an example (a document boundary,
//                    for packing: [Note: packed rows] in io/packing.hpp).
//                    Entry 0 of a non-empty version-2 file has it: no
//                    example crosses from one shard into the next.
//
// Entry i speaks of token i as a *target*: when the sampler predicts token i
// from tokens [.., i), that prediction enters the loss and the gradient only
// if bit 0 of mask[i] is set. Other bits are refused (version 1: values 0
// and 1 only). A shard without a mask file is plain text: every target
// counts; a version-1 file has a loss mask but no example boundaries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

constexpr char kLossMaskMagic[8] = {'Z', 'T', 'L', 'M', 'A', 'S', 'K', '\0'};
constexpr int32_t kLossMaskVersion = 2;        // with example starts
constexpr int32_t kLossMaskVersionPlain = 1;   // the loss bit only
constexpr int64_t kLossMaskHeaderBytes = 24;
constexpr uint8_t kMaskCounts = 1;
constexpr uint8_t kMaskExampleStart = 2;

// A mask file as read: the loss bit of every entry (0 or 1) and, for a
// version-2 file, the positions of the example starts (increasing, 0 first
// when the file is not empty).
struct LossMaskFile {
  std::vector<uint8_t> counts;
  bool has_examples = false;
  std::vector<int64_t> example_starts;
};

// "dir/train.bin" -> "dir/train.mask"; a name not ending in ".bin" gets
// ".mask" appended.
std::string mask_path_for(const std::string& shard_path);

// Reads and validates the whole file; UserError naming the file for a wrong
// magic, version, size or byte value.
LossMaskFile read_loss_mask_file(const std::string& path);
// Its loss bits only.
std::vector<uint8_t> read_loss_mask(const std::string& path);
// Writes through path.tmp then a rename, like write_token_shard. Every entry
// must be 0 or 1 (UserError naming the position otherwise). Version 1: no
// example boundaries.
void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask);
// Version 2: also the example starts (increasing, each < mask.size(), the
// first 0 when mask is not empty; UserError otherwise).
void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask,
                     const std::vector<int64_t>& example_starts);

}  // namespace zt
