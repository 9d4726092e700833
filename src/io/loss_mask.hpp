// Loss masks: which targets of a token shard count in the loss.
//
// [Note: loss mask file] Fine-tuning data (zdata finetune) comes as a token
// shard X.bin plus a companion X.mask beside it (mask_path_for). Its format:
//
//   char  magic[8]   "ZTLMASK\0"
//   int32 version    1
//   int32 zero       reserved, 0
//   int64 count      number of entries N, equal to the shard's token count
//   uint8 mask[N]    1: token i is a target that counts in the loss (a
//                    completion / assistant token, or the EOS that ends
//                    one); 0: it does not (prompt, template, BOS tokens)
//
// Entry i speaks of token i as a *target*: when the sampler predicts token i
// from tokens [.., i), that prediction enters the loss and the gradient only
// if mask[i] == 1. Any other byte value is refused. A shard without a mask
// file is plain text: every target counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

constexpr char kLossMaskMagic[8] = {'Z', 'T', 'L', 'M', 'A', 'S', 'K', '\0'};
constexpr int32_t kLossMaskVersion = 1;
constexpr int64_t kLossMaskHeaderBytes = 24;

// "dir/train.bin" -> "dir/train.mask"; a name not ending in ".bin" gets
// ".mask" appended.
std::string mask_path_for(const std::string& shard_path);

// Reads and validates the whole file; UserError naming the file for a wrong
// magic, version, size or byte value.
std::vector<uint8_t> read_loss_mask(const std::string& path);
// Writes through path.tmp then a rename, like write_token_shard. Every entry
// must be 0 or 1 (UserError naming the position otherwise).
void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask);

}  // namespace zt
