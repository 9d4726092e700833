// Memory estimator: the bytes one rank needs, on the device, in host memory
// and on NVMe, to train a transformer under ZeRO stages 0-3 with optional
// offload, from shapes alone (nothing is allocated). It knows the units and
// the flat-buffer padding of FlatLayout, the buffers a ZeroEngine keeps per
// stage, and what ztrain's units save per micro-batch (modules/block.cpp,
// modules/runner.hpp). The rules and their reasons are [Note: memory
// estimate] in estimator.cpp and docs/memory.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "modules/gpt.hpp"

namespace zt {

// A decoder-only transformer, independent of the trainer's model classes.
struct TransformerShape {
  std::string name;
  int64_t n_layer = 0;
  int64_t d_model = 0;     // C
  int64_t n_head = 0;
  int64_t n_kv_head = 0;   // grouped-query attention; = n_head for multi-head
  int64_t ffn_hidden = 0;  // F: MLP width (GPT-2: 4C)
  int64_t vocab = 0;       // V
  int64_t seq_len = 0;     // T: training sequence (and rows of wpe when learned)
  bool tied_embeddings = true;    // LM head = wte
  bool gated_mlp = false;         // SwiGLU: gate, up (C -> F) and down (F -> C)
  bool learned_positions = true;  // wpe (T, C); false: rotary, no parameters
  bool biases = true;             // biases of the linear layers
  std::string norm = "layernorm";  // layernorm (weight + bias) | rmsnorm (weight)

  int64_t head_dim() const { return d_model / n_head; }
  int64_t qkv_width() const { return d_model + 2 * n_kv_head * head_dim(); }  // C + 2 C kv/heads
  void validate() const;  // throws UserError naming the bad field
};

// GPT-2 as ztrain builds it: LayerNorm, biases, learned positions (seq_len
// rows), LM head tied to wte, F = 4C.
TransformerShape gpt_shape(const GptConfig& cfg);
// Llama-2 70B: 80 layers, C 8192, 64 heads, 8 KV heads, F 28672, V 32000,
// T 4096, RMSNorm, no biases, untied head, SwiGLU, rotary positions.
TransformerShape llama2_70b_shape();

// One unit (DESIGN.md: embedding, each block, head) as ZeRO sees it.
struct UnitParams {
  std::string name;
  int64_t numel = 0;        // own parameters
  int tied_unit = -1;       // unit whose parameter this one also reads (tied head), or -1
  int64_t tied_numel = 0;   // elements of that parameter
};

std::vector<UnitParams> unit_params(const TransformerShape& s);
int64_t block_parameters(const TransformerShape& s);
int64_t count_parameters(const TransformerShape& s);  // a tied parameter counts once

// Bytes per token that one block keeps from its forward to its backward
// (stash plus its output; its input is the previous unit's output), and that
// its backward needs as temporaries. act: bytes of the activation dtype.
int64_t block_saved_bytes_per_token(const TransformerShape& s, int64_t act);
int64_t block_backward_bytes_per_token(const TransformerShape& s, int64_t act);

struct EstimateInput {
  TransformerShape shape;
  int world = 1;  // ranks = dp * pp
  int dp = 1;
  int pp = 1;
  int zero_stage = 0;
  std::string offload_optimizer = "none";  // none|cpu|nvme (stage >= 1)
  std::string offload_param = "none";      // none|cpu|nvme (stage 3)
  DType param_dtype = DType::bf16;         // f32|bf16|f16; activations use it too
  int64_t micro_batch = 1;
  bool activation_checkpointing = false;
  std::optional<bool> overlap_comm;  // unset: DeepSpeed's default, on for stage 3 only
  // zero_optimization, in elements (DeepSpeed's defaults).
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_reuse_distance = 1000000000;
  int64_t sub_group_size = 1000000000;
  // Host staging for NVMe offload: offload_optimizer.buffer_count buffers of
  // one optimizer sub-group, offload_param.buffer_count x buffer_size.
  int optimizer_buffer_count = 4;
  int param_buffer_count = 5;
  int64_t param_buffer_size = 100000000;
  int64_t classifier_chunk_bytes = int64_t{8} << 20;  // CpuKernels' default
  void validate() const;
};

// Bytes per rank. The device columns add up to total(), each at its own
// peak; host and nvme hold what offload moved off the device (per rank: a
// node needs host x ranks per node).
struct MemoryEstimateRow {
  int zero_stage = 0;
  std::string offload_optimizer = "none";
  std::string offload_param = "none";
  bool supported = true;  // false: the combination does not exist (see note)
  std::string note;
  int pp_stage = 0;         // the pipeline stage reported (the one needing most)
  int64_t num_params = 0;   // whole model
  int64_t stage_params = 0; // parameters of the reported pipeline stage
  int64_t params = 0;       // working copy: replicated, or shard + gathered + persistent
  int64_t grads = 0;        // fp32: full, shard, and full-size buffers of the units in backward
  int64_t optimizer = 0;    // fp32 master (not at stage 0 in fp32) + Adam m + v
  int64_t activations = 0;  // saved for backward, all in-flight micro-batches
  int64_t comm = 0;         // reduce / all-gather staging buckets
  int64_t workspace = 0;    // backward temporaries, recomputation, logits chunk
  int64_t host = 0;         // host memory for offload (pinned)
  int64_t nvme = 0;
  int64_t total() const { return params + grads + optimizer + activations + comm + workspace; }
  int64_t model_states() const { return params + grads + optimizer; }
};

MemoryEstimateRow estimate(const EstimateInput& in);

// Stage 0 (offload none, cpu, nvme: the last two unsupported), stages 1 and 2
// x offload_optimizer none/cpu/nvme, stage 3 x (none, cpu optimizer, cpu
// optimizer + parameters, nvme optimizer + parameters); other fields as in `base`.
std::vector<MemoryEstimateRow> estimate_table(const EstimateInput& base);

// A DeepSpeed-estimator-like table in GiB per rank, with a header that names
// the model, world, dtype and batch.
std::string format_estimate_table(const EstimateInput& base, const std::vector<MemoryEstimateRow>& rows);

// Llama-2 70B, bf16, micro-batch 1, seq 4096, on `world` ranks (dp = world):
// the table without and with activation checkpointing (docs/memory.md).
std::string llama2_70b_table(int world);

}  // namespace zt
