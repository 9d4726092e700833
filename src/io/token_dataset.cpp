#include "io/token_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "io/loss_mask.hpp"

namespace zt {

TokenDataset TokenDataset::open(const std::vector<std::string>& paths) {
  if (paths.empty()) ZT_USER_ERROR("token dataset: no files given");
  TokenDataset ds;
  // Segments point into the mappings, which stay put when a TokenShard moves.
  ds.shards_.reserve(paths.size());
  ds.masks_.reserve(paths.size());  // the segments point into these vectors' buffers
  std::error_code ec;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& p = paths[i];
    ds.shards_.emplace_back(p);
    const TokenShard& s = ds.shards_.back();
    const std::string mpath = mask_path_for(p);
    // The mask as the directory entry is: a link that leads nowhere, a
    // directory or an entry that cannot be looked at is named, never taken
    // for "no mask" (the run would count every target in the loss).
    const std::filesystem::file_status link = std::filesystem::symlink_status(mpath, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
      ZT_USER_ERROR("loss mask '", mpath, "' beside '", p, "' cannot be looked at: ", ec.message());
    const bool masked = std::filesystem::exists(link);
    if (masked) {
      const std::filesystem::file_status target = std::filesystem::status(mpath, ec);
      if (!std::filesystem::is_regular_file(target))
        ZT_USER_ERROR("loss mask '", mpath, "' beside '", p, "' is ",
                      !std::filesystem::exists(target) ? "a link to nothing" : "not a regular file",
                      ": give the mask zdata finetune wrote, or remove it to count every target");
    }
    if (i == 0) ds.has_mask_ = masked;
    if (masked != ds.has_mask_) {
      ZT_USER_ERROR("token dataset: '", masked ? paths[0] : p, "' has no loss mask ('",
                    mask_path_for(masked ? paths[0] : p), "') but '", masked ? p : paths[0],
                    "' has one; fine-tuning and plain shards cannot be mixed in one dataset");
    }
    const uint8_t* mask = nullptr;
    if (masked) {
      LossMaskFile f = read_loss_mask_file(mpath);
      if (i == 0) ds.has_examples_ = f.has_examples;
      ds.has_examples_ = ds.has_examples_ && f.has_examples;  // boundaries only when every shard has them
      for (int64_t start : f.example_starts) ds.example_starts_.push_back(ds.total_ + start);
      ds.masks_.push_back(std::move(f.counts));
      if (static_cast<int64_t>(ds.masks_.back().size()) != s.size())
        ZT_USER_ERROR("loss mask '", mpath, "' has ", ds.masks_.back().size(), " entries but its shard '", p,
                      "' has ", s.size(), " tokens");
      mask = ds.masks_.back().data();
    }
    ds.add_segment(s.token_bytes() == 2 ? static_cast<const void*>(s.tokens()) : s.tokens32(), s.token_bytes(),
                   s.size(), mask);
    ds.max_token_ = std::max(ds.max_token_, s.max_token());
  }
  if (!ds.has_examples_) ds.example_starts_.clear();
  return ds;
}

TokenDataset TokenDataset::open_list(const std::string& comma_separated_paths) {
  const std::vector<std::string> paths = split_path_list(comma_separated_paths);
  if (paths.empty()) ZT_USER_ERROR("token dataset: no files in '", comma_separated_paths, "'");
  return open(paths);
}

TokenDataset TokenDataset::from_tokens(std::vector<uint16_t> tokens, std::string name) {
  TokenDataset ds;
  ds.memory_ = std::move(tokens);
  ds.memory_name_ = std::move(name);
  // A moved vector keeps its buffer, so this pointer survives moves of ds.
  ds.add_segment(ds.memory_.data(), 2, static_cast<int64_t>(ds.memory_.size()));
  for (uint16_t t : ds.memory_) ds.max_token_ = std::max(ds.max_token_, static_cast<int64_t>(t));
  return ds;
}

void TokenDataset::add_segment(const void* data, int width, int64_t size, const uint8_t* mask) {
  if (size > 0) segments_.push_back({data, width, size, total_, mask});
  total_ += size;
}

std::vector<TokenDataset::Segment>::const_iterator TokenDataset::segment_at(int64_t pos) const {
  // Last segment whose begin <= pos.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), pos,
                             [](int64_t p, const Segment& s) { return p < s.begin; });
  return --it;
}

void TokenDataset::copy_mask(int64_t start, int64_t len, uint8_t* out) const {
  ZT_CHECK(start >= 0 && len >= 0 && start + len <= total_, "mask window [", start, ", ", start + len,
           ") outside the dataset of ", total_, " tokens");
  if (len == 0) return;
  if (!has_mask_) {
    std::fill(out, out + len, uint8_t{1});
    return;
  }
  auto it = segment_at(start);
  for (int64_t done = 0; done < len; ++it) {
    const int64_t offset = start + done - it->begin;
    const int64_t n = std::min(len - done, it->size - offset);
    std::copy(it->mask + offset, it->mask + offset + n, out + done);
    done += n;
  }
}

int64_t TokenDataset::max_token() const { return max_token_; }

std::vector<std::string> TokenDataset::paths() const {
  std::vector<std::string> out;
  for (const auto& s : shards_) out.push_back(s.path());
  return out;
}

std::string TokenDataset::describe() const {
  if (shards_.empty()) return memory_name_;
  std::string out;
  for (const auto& s : shards_) out += (out.empty() ? "" : ",") + s.path();
  return out;
}

void TokenDataset::copy_window(int64_t start, int64_t len, int32_t* out) const {
  ZT_CHECK(start >= 0 && len >= 0 && start + len <= total_, "window [", start, ", ", start + len,
           ") outside the dataset of ", total_, " tokens");
  if (len == 0) return;
  auto it = segment_at(start);
  int64_t done = 0;
  while (done < len) {
    const int64_t offset = start + done - it->begin;
    const int64_t n = std::min(len - done, it->size - offset);
    // uint32 ids reach the model as int32: validate_vocab (vocab_size is an
    // int) has made sure every id is below 2^31.
    if (it->width == 2) {
      const uint16_t* src = static_cast<const uint16_t*>(it->data) + offset;
      for (int64_t i = 0; i < n; ++i) out[done + i] = static_cast<int32_t>(src[i]);
    } else {
      const uint32_t* src = static_cast<const uint32_t*>(it->data) + offset;
      for (int64_t i = 0; i < n; ++i) out[done + i] = static_cast<int32_t>(src[i]);
    }
    done += n;
    ++it;
  }
}

void TokenDataset::validate_vocab(int vocab_size) const {
  if (max_token_ < vocab_size) return;
  for (const auto& s : shards_) s.validate_vocab(vocab_size);
  for (size_t i = 0; i < memory_.size(); ++i) {
    if (memory_[i] >= vocab_size) {
      ZT_USER_ERROR(memory_name_, ": token ", memory_[i], " at position ", i,
                    " is outside the model's vocabulary (vocab_size ", vocab_size, ")");
    }
  }
}

namespace {

template <typename T>
double entropy_of(const T* tokens, int64_t n) {
  if (n <= 0) return 0.0;
  T mx = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, tokens[i]);
  std::vector<int64_t> counts;
  if (mx < (1u << 24)) {
    counts.assign(static_cast<size_t>(mx) + 1, 0);
    for (int64_t i = 0; i < n; ++i) ++counts[tokens[i]];
  } else {
    // Ids of any uint32 value (a shard not yet checked against a
    // vocabulary): count runs of a sorted copy rather than a 2^32 table.
    std::vector<T> sorted(tokens, tokens + n);
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      counts.push_back(static_cast<int64_t>(j - i));
      i = j;
    }
  }
  double h = 0.0;
  const double inv_n = 1.0 / static_cast<double>(n);
  for (int64_t c : counts) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) * inv_n;
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace

double unigram_entropy_nats(const uint16_t* tokens, int64_t n) { return entropy_of(tokens, n); }
double unigram_entropy_nats(const uint32_t* tokens, int64_t n) { return entropy_of(tokens, n); }

}  // namespace zt
