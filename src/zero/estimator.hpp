// Memory estimator: the bytes one rank needs, on the device, in host memory
// and on NVMe, to train a model under ZeRO stages 0-3 with optional offload,
// from its description alone (nothing is allocated). The units, their
// tensors and what they keep per token come from the model description
// (modules/model_desc.hpp); a pipeline stage's units and micro-batches in
// flight come from the caller (train/memory_estimate.cpp takes them from the
// partitioner and the schedule). It knows the flat-buffer padding of
// FlatLayout and the buffers a ZeroEngine keeps per stage. The rules and
// their reasons are [Note: memory estimate] in estimator.cpp and
// docs/memory.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "modules/model_desc.hpp"

namespace zt {

// What one pipeline stage holds and runs, as the partitioner placed it.
struct StageContents {
  std::vector<std::vector<int>> chunks;  // per local chunk, in order: its units (model indices, ascending)
  int mirror = -1;                       // a unit held only as a tie copy, never run (the tied embedding), or -1
  int in_flight = 1;                     // (micro-batch, chunk) pairs past forward and before backward, at most
  std::vector<int> units() const;        // every unit held, chunks' and mirror, ascending
};

// The whole model as one stage: no pipeline.
StageContents whole_model(const ModelDesc& m);

struct EstimateInput {
  ModelDesc model;
  std::vector<StageContents> stages;  // one per pipeline stage; empty: whole_model (pp 1)
  int world = 1;  // ranks = dp * pp
  int dp = 1;
  int pp = 1;  // = stages.size() when stages are given
  int zero_stage = 0;
  std::string offload_optimizer = "none";  // none|cpu|nvme (stage >= 1)
  std::string offload_param = "none";      // none|cpu|nvme (stage 3)
  DType param_dtype = DType::bf16;         // f32|bf16|f16; activations use it too
  int64_t micro_batch = 1;
  // Micro-batches per step (gradient accumulation x pipeline): more than
  // one, and gradients on the host add later pieces through pinned slots.
  int64_t micro_batches_per_step = 1;
  bool activation_checkpointing = false;
  int recompute_layers = -1;  // model.recompute_layers ([Note: partial recomputation]); -1 = all
  // activation_checkpointing.cpu_checkpointing ([Note: activation offload] in
  // modules/activation_offload.hpp): the outputs a recomputed unit passes to
  // a recomputed unit wait in pinned host memory; the device keeps a pool of
  // (micro-batches in flight + 1 + kSlack) of them.
  bool cpu_checkpointing = false;
  std::optional<bool> overlap_comm;  // unset: DeepSpeed's default, on for stage 3 only
  // zero_optimization, in elements (DeepSpeed's defaults).
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_reuse_distance = 1000000000;
  int64_t sub_group_size = 1000000000;
  // Host staging for NVMe offload: offload_optimizer.buffer_count / 3 sets
  // of buffers of one optimizer sub-group; offload_param.buffer_count
  // buffers of the largest parameter shard in the file (at most buffer_size).
  int optimizer_buffer_count = 4;
  int param_buffer_count = 5;
  int64_t param_buffer_size = 100000000;
  // offload_param "nvme": shard elements kept in host memory (max_in_cpu).
  int64_t param_max_in_cpu = 1000000000;
  // The direct-I/O alignment of the optimizer's and the parameters' swap
  // directories: each region of a file is padded to it (4096, the largest a
  // device has, unless the directory exists to be probed).
  int64_t nvme_alignment = 4096;
  int64_t param_nvme_alignment = 4096;
  // Host offload (docs/offload.md): pinned or pageable states, the fraction
  // of the optimizer offloaded, the delayed update's copies, the pipelined
  // slots of the host step (HostOffloadOptions: slots x tile elements).
  bool optimizer_pin_memory = false;
  bool param_pin_memory = false;
  double offload_ratio = 1.0;
  bool delayed_update = false;
  bool grad_accumulation_on_device = false;  // offload.grad_accumulation "device"
  bool param_from_master = false;            // offload.param_from_master
  int64_t host_grad_bytes = 4;               // offload.grad_dtype: 4 (fp32) or 2 (bf16)
  int offload_slots = 4;
  int64_t offload_tile_elements = int64_t{1} << 22;
  // The classifier's workspace, by the kernels that run it:
  //  - cpu_chunks: CpuKernels' chunks of f32 logits rows (all classes) of at
  //    most classifier_chunk_bytes;
  //  - cuda_one_pass: the CUDA one pass ([Note: classifier in one pass] in
  //    modules/cuda/classifier.cu): equal chunks of rows of Vp = V rounded up
  //    to 8 logits in the parameter dtype (f32 with cuda_logits_f32), at most
  //    cuda_one_pass_chunk_bytes, plus the weight copied into Vp rows and an
  //    f32 (Vp - V rounded down to 8, C) tail of dw when V % 8 != 0;
  //  - cuda_separate: the CUDA forward and backward calls, slices of classes
  //    over all rows, about cuda_separate_chunk_bytes.
  enum class Classifier { cpu_chunks, cuda_one_pass, cuda_separate };
  Classifier classifier = Classifier::cpu_chunks;
  int64_t classifier_chunk_bytes = int64_t{8} << 20;           // CpuKernels' default
  int64_t cuda_one_pass_chunk_bytes = int64_t{2} << 30;        // CudaKernelOptions' default
  int64_t cuda_separate_chunk_bytes = int64_t{256} << 20;      // CudaKernelOptions' default
  bool cuda_logits_f32 = false;                                // ZTRAIN_CLASSIFIER=one-pass-f32
  void validate() const;
};

// Bytes per rank. The device columns are each at its own peak; total() is
// the device's peak; host and nvme hold what offload moved off the device
// (per rank: a node needs host x ranks per node).
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
  // What one micro-batch keeps in its saved-activations arena on the stage
  // (every chunk of the stage, trainer buffers excluded): the size to give
  // each micro-batch's arena.
  int64_t micro_batch_activations = 0;
  // What the backward's temporaries need at most (the workspace column is
  // the arena chunk the trainer makes of it: arena_chunk_bytes).
  int64_t workspace_need = 0;
  int64_t comm = 0;         // reduce / all-gather staging buckets
  int64_t workspace = 0;    // backward temporaries, recomputation, logits chunk
  int64_t host_pinned = 0;    // host memory for offload: page-locked
  int64_t host_pageable = 0;  // and pageable (pin_memory false)
  int64_t nvme = 0;
  // The device's peak when the estimator follows the step ([Note: device
  // total over the step] in estimator.cpp; stages 2-3 without a pipeline):
  // at most the sum of the columns, which peak at different times. 0: that sum.
  int64_t device_total = 0;
  std::string device_peak_at;  // where in the step that peak is ("h.3's reduction"), when followed
  int64_t host() const { return host_pinned + host_pageable; }
  int64_t columns() const { return params + grads + optimizer + activations + comm + workspace; }
  int64_t total() const { return device_total > 0 ? device_total : columns(); }
  int64_t model_states() const { return params + grads + optimizer; }
};

// The trainer's arenas ([Note: micro-batch memory] in modules/runner.hpp):
// each micro-batch's saved activations and the shared scratch start with one
// chunk of the estimated need plus 5% (at least 64 KiB), so one chunk
// usually holds it all; the columns count that chunk.
int64_t arena_chunk_bytes(int64_t need);

// The classifier's workspace for `tokens` rows of V classes of width C, by
// in.classifier and in.param_dtype (EstimateInput::Classifier).
int64_t classifier_workspace(const EstimateInput& in, int64_t V, int64_t C, int64_t tokens);

// One row per pipeline stage, and the stage needing most.
std::vector<MemoryEstimateRow> estimate_stages(const EstimateInput& in);
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
