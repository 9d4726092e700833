#include "train/memory_estimate.hpp"

#include <cstdio>
#include <sstream>

#include "io/token_dataset.hpp"

namespace zt {

MemoryEstimate estimate_memory(const Config& cfg, int dp_size) {
  const ModelConfig& m = cfg.model;
  const double C = m.d_model, L = m.n_layer, V = m.vocab_size, Tm = m.seq_len, H = m.n_head;
  // GPT-2: embeddings (V + T) C; per block 12 C^2 + 13 C; final norm 2C; tied head.
  const double n = (V + Tm) * C + L * (12 * C * C + 13 * C) + 2 * C;
  const bool half = cfg.bf16.enabled || cfg.fp16.enabled;
  const double pbytes = half ? 2 : 4;
  MemoryEstimate e;
  e.num_params = static_cast<int64_t>(n);
  e.params_bytes = n * pbytes;
  e.master_bytes = half ? n * 4 : 0;
  e.grads_bytes = n * 4;
  e.optim_bytes = n * 8;
  // Saved activations of one micro-batch (modules/block.cpp): per block 12 C
  // values per token in storage dtype plus (4 + n_head) fp32 statistics
  // (attention keeps only its log-sum-exp); with checkpointing, each block's
  // input plus one block recomputed at a time. Plus the embedding output and
  // the classifier's logits chunk.
  const double B = static_cast<double>(cfg.batch.micro_batch), T = Tm;
  const double abytes = half ? 2 : 4;
  const double per_block = B * T * (12 * C * abytes + (4 + H) * 4);
  const double blocks = m.activation_checkpointing ? L * B * T * C * abytes + per_block : L * per_block;
  e.activations_bytes = blocks + 2 * B * T * C * abytes + B * T * 16 + 8.0 * 1048576;
  (void)dp_size;  // stage 0 replicates everything; the ZeRO stages divide by it
  return e;
}

std::string format_memory_estimate(const MemoryEstimate& e) {
  std::ostringstream os;
  auto line = [&](const char* what, double bytes) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %-22s %12.2f MiB\n", what, bytes / 1048576.0);
    os << buf;
  };
  os << "memory estimate per rank (" << e.num_params << " parameters):\n";
  line("parameters", e.params_bytes);
  line("fp32 master weights", e.master_bytes);
  line("gradients (fp32)", e.grads_bytes);
  line("optimizer (Adam m, v)", e.optim_bytes);
  line("activations", e.activations_bytes);
  line("total", e.total());
  return os.str();
}

void validate_data_files(const Config& cfg) {
  if (cfg.data.embedded) return;
  for (const std::string* path : {&cfg.data.train, &cfg.data.val}) {
    if (path->empty()) continue;
    TokenDataset::open_list(*path).validate_vocab(cfg.model.vocab_size);
  }
}

}  // namespace zt
