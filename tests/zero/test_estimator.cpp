// The memory estimator (zero/estimator.hpp): exact parameter counts, the
// per-stage relations of ZeRO, offload moving bytes off the device, and the
// two places where the estimate must equal what ztrain really allocates: the
// model states of the flat layout (what ZeroEngine allocates) and the
// activations the unit runner saves for backward. Pipeline stages as the
// partitioner makes them are tested in test_estimator_stages.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <memory>

#include "../modules/module_test_support.hpp"
#include "modules/llama_desc.hpp"
#include "zero/estimator.hpp"
#include "zero/grad_landing.hpp"
#include "zero/flat_layout.hpp"

namespace zt::test {
namespace {

const GptConfig kGpt2{12, 12, 768, 1024, 50257};
const GptConfig kTiny{2, 4, 64, 64, 256};
const GptConfig kOdd{3, 4, 36, 24, 101};  // odd sizes: padding to dp matters

std::vector<const Unit*> unit_views(const std::vector<std::unique_ptr<Unit>>& units) {
  std::vector<const Unit*> v;
  for (const auto& u : units) v.push_back(u.get());
  return v;
}

ModelDesc gpt(const GptConfig& c) { return describe_gpt2(gpt2_shape(c)); }
ModelDesc llama() { return describe_llama(llama2_70b_shape()); }

EstimateInput input_for(const ModelDesc& m, int dp, int stage, DType dt = DType::bf16) {
  EstimateInput in;
  in.model = m;
  in.world = in.dp = dp;
  in.zero_stage = stage;
  in.param_dtype = dt;
  in.micro_batch = 2;
  return in;
}

TEST(Estimator, ParameterCounts) {
  EXPECT_EQ(gpt(kGpt2).num_params(), 124439808);
  const int64_t n = llama().num_params();
  EXPECT_NEAR(static_cast<double>(n), 68.98e9, 68.98e9 * 1e-3);
  EXPECT_EQ(n, 68976648192);  // 80 x 855,654,400 + 2 x 32000 x 8192 + 8192
  EXPECT_EQ(llama().units[1].numel(), 855654400);
  // The description is the model ztrain builds, unit by unit.
  for (const GptConfig& c : {kGpt2, kTiny, kOdd}) {
    const auto units = build_gpt(c);
    const ModelDesc d = gpt(c);
    ASSERT_EQ(static_cast<size_t>(d.num_units()), units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      int64_t n = 0;
      for (const ParamSpec& p : units[u]->params()) n += p.shape.numel();
      EXPECT_EQ(d.units[u].numel(), n) << units[u]->name();
    }
    EXPECT_EQ(d.num_params(), count_params(unit_views(units)));
  }
}

// What ZeroEngine allocates (zero_engine.cpp, [Note: ZeRO stages]) is
// padded element counts of the flat layout x dtype sizes: stage 0 lays out
// with dp 1 and keeps everything whole; stages >= 1 keep an fp32 master, m, v
// and gradient shard of unit.shard elements per unit, stage 1 also the full
// fp32 gradient, stages 2-3 full-size fp32 gradient buffers only for the
// units in backward, stage 3 a working shard instead of the working copy.
TEST(Estimator, ModelStatesMatchFlatLayout) {
  for (const GptConfig& c : {kTiny, kOdd}) {
    const auto units = build_gpt(c);
    const auto views = unit_views(units);
    for (DType dt : {DType::f32, DType::bf16}) {
      const int64_t pb = static_cast<int64_t>(dtype_size(dt));
      const FlatLayout whole(views, 1);
      const MemoryEstimateRow s0 = estimate(input_for(gpt(c), 4, 0, dt));
      EXPECT_EQ(s0.params, whole.total_padded() * pb);
      EXPECT_EQ(s0.grads, whole.total_padded() * 4);
      EXPECT_EQ(s0.optimizer, whole.total_padded() * ((dt == DType::f32 ? 0 : 4) + 8));
      for (int dp : {2, 3, 5}) {
        const FlatLayout layout(views, dp);
        int64_t shard = 0, others = 0;  // others: the largest unit but the embedding (tied owner)
        for (int u = 0; u < layout.num_units(); ++u) {
          shard += layout.unit(u).shard;
          if (u > 0) others = std::max(others, layout.unit(u).padded);
        }
        const int64_t wte_owner = layout.unit(0).padded;
        const MemoryEstimateRow s1 = estimate(input_for(gpt(c), dp, 1, dt));
        const MemoryEstimateRow s2 = estimate(input_for(gpt(c), dp, 2, dt));
        EXPECT_EQ(s1.params, layout.total_padded() * pb);
        EXPECT_EQ(s1.grads, (layout.total_padded() + shard) * 4);
        EXPECT_EQ(s1.optimizer, shard * 12);
        EXPECT_EQ(s2.params, layout.total_padded() * pb);
        EXPECT_EQ(s2.grads, (shard + wte_owner + others) * 4) << "shard + held wte owner + current unit";
        EXPECT_EQ(s2.optimizer, shard * 12);
        // Stage 3 with every unit partitioned, no prefetch and no reuse: the
        // live units are the head and the embedding it ties to, or a block.
        EstimateInput in = input_for(gpt(c), dp, 3, dt);
        in.stage3_param_persistence_threshold = 1;
        in.stage3_prefetch_bucket_size = 0;
        in.stage3_max_reuse_distance = -1;
        const MemoryEstimateRow s3 = estimate(in);
        const int64_t live = std::max(layout.unit(1).padded, layout.unit(layout.num_units() - 1).padded + wte_owner);
        EXPECT_EQ(s3.params, ((dt == DType::f32 ? 0 : shard) + live) * pb);
        EXPECT_EQ(s3.grads, (shard + wte_owner + 2 * others) * 4) << "overlap_comm: one more unit";
        EXPECT_EQ(s3.optimizer, shard * 12);
      }
    }
  }
}

TEST(Estimator, StagesPartitionByDp) {
  const ModelDesc s = llama();
  const int dp = 8;
  const MemoryEstimateRow r0 = estimate(input_for(s, dp, 0)), r1 = estimate(input_for(s, dp, 1)),
                          r2 = estimate(input_for(s, dp, 2)), r3 = estimate(input_for(s, dp, 3));
  const int64_t psi = s.num_params();
  const int64_t block_params = s.units[1].numel();
  const int64_t block = block_params + (dp - block_params % dp) % dp;  // padded
  const int64_t head = psi - 80 * block_params - 32000 * 8192;           // untied: norm + lm_head
  // Replicated: 2 + 4 + 12 = 18 bytes per parameter (fp32 gradients).
  EXPECT_EQ(r0.model_states(), 18 * psi);
  // Padding adds fewer than dp elements per unit (82 units).
  const int64_t slack = dp * 82;
  const int64_t shard = r1.optimizer / 12;
  EXPECT_NEAR(r1.optimizer, r0.optimizer / dp, 12 * slack);
  EXPECT_EQ(r1.grads, 4 * (r1.params / 2 + shard));  // full + shard
  EXPECT_EQ(r2.grads, 4 * (shard + block));          // shard + the block in backward
  EXPECT_EQ(r2.params, r1.params);
  EXPECT_EQ(r2.optimizer, r1.optimizer);
  // Stage 3: shard + live gathered units. The last block is kept gathered
  // for its backward (its reuse distance, twice the head, is under 1e9) while
  // the head is gathered; nothing persists (every unit > 1e5).
  const int64_t live = r3.params - 2 * shard;
  EXPECT_EQ(live, (block + head + (dp - head % dp) % dp) * 2);
  EXPECT_EQ(r3.model_states() - live - 4 * 2 * block, 18 * shard) << "two blocks' gradients with overlap_comm";
  // Activations and workspace do not depend on the stage.
  EXPECT_EQ(r0.activations, r3.activations);
  EXPECT_EQ(r0.workspace, r3.workspace);
  EXPECT_EQ(r0.comm, 0);
  EXPECT_GT(r3.comm, 0);
}

// One rank adds each unit's gradient into its shard straight from the
// unit's buffer (reduce_scatter_unit): no reduce bucket is staged, unless the
// gradients land on the host, whose pieces are staged for their copies.
TEST(Estimator, OneRankStagesNoReduceBucket) {
  EXPECT_EQ(estimate(input_for(gpt(kTiny), 1, 3)).comm, 0);
  EXPECT_GT(estimate(input_for(gpt(kTiny), 2, 3)).comm, 0);
  EstimateInput off = input_for(gpt(kTiny), 1, 3);
  off.offload_optimizer = "cpu";
  EXPECT_GT(estimate(off).comm, 0);
}

TEST(Estimator, Stage3PrefetchReuseAndPersistence) {
  // Blocks of 49,856 parameters, larger than the embedding and the head.
  EstimateInput in = input_for(gpt(GptConfig{4, 4, 64, 64, 256}), 2, 3);
  const int64_t block = in.model.units[1].numel();
  const int64_t padded = in.model.num_params();  // every unit is even: no padding at dp 2
  in.stage3_param_persistence_threshold = 1;          // nothing persists
  in.stage3_max_reuse_distance = -1;                  // nothing is kept after its use
  in.stage3_prefetch_bucket_size = 0;
  const MemoryEstimateRow none = estimate(in);
  in.stage3_prefetch_bucket_size = block;  // the next block, whole
  const MemoryEstimateRow next = estimate(in);
  in.stage3_max_live_parameters = 0;  // no prefetch past the cap; the units in use are gathered anyway
  const MemoryEstimateRow capped = estimate(in);
  EXPECT_EQ(next.params - none.params, block * 2);
  EXPECT_EQ(capped.params, none.params);
  // DeepSpeed's defaults: reuse keeps this small model gathered whole.
  in.stage3_max_live_parameters = 1000000000;
  in.stage3_max_reuse_distance = 1000000000;
  EXPECT_EQ(estimate(in).params, (padded + padded / 2) * 2);
  // After its own backward a unit is next used by the next micro-batch's
  // forward, after every other unit: kept when they fit in the distance
  // (ZeroEngine::release), so the backward ends with every unit gathered.
  in.stage3_max_reuse_distance = padded - 1;
  EXPECT_EQ(estimate(in).params, (padded + padded / 2) * 2);
  in.stage3_max_reuse_distance = padded - block - 1;  // a block's others do not fit
  EXPECT_LT(estimate(in).params, (padded + padded / 2) * 2);
  // Persistence: every unit under 1e5 stays whole; the working shard remains.
  in = input_for(in.model, 2, 3);
  in.stage3_max_reuse_distance = -1;
  EXPECT_EQ(estimate(in).params, (padded + padded / 2) * 2);
}

TEST(Estimator, OffloadMovesBytesOffTheDevice) {
  const ModelDesc s = llama();
  for (int stage = 1; stage <= 3; ++stage) {
    EstimateInput in = input_for(s, 8, stage);
    const MemoryEstimateRow dev = estimate(in);
    in.offload_optimizer = "cpu";
    const MemoryEstimateRow cpu = estimate(in);
    in.offload_optimizer = "nvme";
    const MemoryEstimateRow nvme = estimate(in);
    const int64_t shard = dev.optimizer / 12;
    const int64_t pb = 2;  // bf16 working parameters
    EXPECT_EQ(cpu.optimizer, 0);
    // Master, m and v and the fp32 gradient shard ([Note: gradients on the
    // host]) go to pageable host memory (pin_memory false), the pinned
    // parameter slots of the host step beside them.
    EXPECT_EQ(cpu.host_pageable, 16 * shard);
    EXPECT_GT(cpu.host_pinned, 0);
    EXPECT_LT(cpu.host_pinned, 4 * (int64_t{1} << 22) * 4 + 1);
    // The device loses the gradient shard and the optimizer and, below
    // stage 3, gains the working shard the host refreshes.
    EXPECT_EQ(cpu.params, dev.params + (stage < 3 ? pb * shard : 0));
    EXPECT_EQ(cpu.grads, dev.grads - 4 * shard);
    // Communication: a reduction receives pieces of C = reduce_bucket_size
    // / dp fp32 elements (a block's 107M-element shard is cut into them,
    // dp packed at a time); the landing holds kDefaultInFlight of them on
    // their way to the host. Stage 1 starts every unit's reduction at once;
    // stages 1-2 publish the updated shards from a send buffer (and the
    // blocks in pieces of allgather_bucket_size / dp) unless the host
    // refreshed the working shard.
    const int64_t C = 500000000 / 8, landing = GradLanding::kDefaultInFlight * C * 4;
    const int64_t red = C * 4 + 8 * C * 4, publish = pb * shard + 8 * C * pb;
    // Stage 1: the units in one piece (embedding and head) keep their
    // staging while the blocks go through theirs a piece at a time.
    int64_t whole_units = red;
    for (const UnitDesc& u : s.units)
      if ((u.numel() + 7) / 8 <= C) whole_units += (u.numel() + 7) / 8 * 4;
    if (stage == 1) {
      EXPECT_EQ(cpu.comm, whole_units + landing);
      EXPECT_EQ(dev.comm, std::max(whole_units, publish));
    } else if (stage == 2) {
      EXPECT_EQ(cpu.comm, red + landing);
      EXPECT_EQ(dev.comm, std::max(red, publish));
    } else {
      EXPECT_EQ(cpu.comm - dev.comm, landing) << "the same staging (two units with overlap_comm) and gather bucket";
    }
    EXPECT_EQ(nvme.total(), cpu.total());
    EXPECT_EQ(nvme.nvme, 12 * shard);
    EXPECT_GT(nvme.host_pageable, 4 * shard) << "the gradient shard and one set of sub-group buffers";
    EXPECT_LT(nvme.host(), cpu.host());
    EXPECT_EQ(dev.host() + dev.nvme, 0);
    // Pinned states and gradients, the delayed update's second gradient
    // buffer and 16-bit copy, gradient accumulation's slots, a ratio.
    in.offload_optimizer = "cpu";
    in.optimizer_pin_memory = true;
    const MemoryEstimateRow pinned = estimate(in);
    EXPECT_EQ(pinned.host_pinned, cpu.host_pinned + 16 * shard);
    in.delayed_update = true;
    EXPECT_EQ(estimate(in).host_pinned, pinned.host_pinned + (4 + pb) * shard);
    in.delayed_update = false;
    in.micro_batches_per_step = 4;
    // As many pinned fp32 slots as the device stages pieces in flight.
    EXPECT_EQ(estimate(in).host_pinned, pinned.host_pinned + landing);
    in.micro_batches_per_step = 1;
    in.delayed_update = false;
    in.optimizer_pin_memory = false;
    in.offload_ratio = 0.25;
    const MemoryEstimateRow quarter = estimate(in);
    EXPECT_EQ(quarter.host_pageable, 12 * (shard / 4)) << "with a ratio the gradient shard stays on the device";
    EXPECT_EQ(quarter.optimizer, 12 * (shard - shard / 4));
    EXPECT_EQ(quarter.grads, dev.grads);
  }
  EstimateInput in = input_for(s, 8, 3);
  in.offload_optimizer = "cpu";
  const MemoryEstimateRow opt_only = estimate(in);
  in.offload_param = "cpu";
  const MemoryEstimateRow both = estimate(in);
  const int64_t param_shard = estimate(input_for(s, 8, 2)).params / 8;
  EXPECT_EQ(opt_only.params - both.params, param_shard);
  EXPECT_EQ(both.host_pageable - opt_only.host_pageable, param_shard);
  EXPECT_GT(both.comm, opt_only.comm) << "the upload pool";
  // Not valid combinations.
  in = input_for(s, 8, 0);
  in.offload_optimizer = "cpu";
  EXPECT_FALSE(estimate(in).supported);
  in = input_for(s, 8, 2);
  in.offload_param = "cpu";
  EXPECT_FALSE(estimate(in).supported);
}

// [Note: parameter offload to NVMe]: the first units within max_in_cpu
// elements in host memory, every other unit's shard in the file, each padded
// to the alignment, and buffer_count pinned read buffers of the largest.
TEST(Estimator, ParametersOnNvme) {
  const ModelDesc m = gpt(kOdd);
  const int dp = 3;
  EstimateInput in = input_for(m, dp, 3);
  in.offload_optimizer = "cpu";
  in.offload_param = "cpu";
  in.param_buffer_count = 2;  // the device's upload pool; with nvme the read buffers too
  const MemoryEstimateRow cpu = estimate(in);
  in.offload_param = "nvme";
  std::vector<int64_t> shards;
  for (const UnitDesc& u : m.units) shards.push_back((u.numel() + dp - 1) / dp);
  for (int64_t al : {512, 4096}) {
    in.param_nvme_alignment = al;
    auto pad = [&](int64_t bytes) { return (bytes + al - 1) / al * al; };
    // Every shard in the file.
    in.param_max_in_cpu = 0;
    const MemoryEstimateRow all = estimate(in);
    int64_t file = 0, largest = 0;
    for (int64_t sh : shards) {
      file += pad(2 * sh);
      largest = std::max(largest, sh);
    }
    EXPECT_EQ(all.nvme, file);
    EXPECT_EQ(all.total(), cpu.total()) << "the device side is the same as with the parameters on the host";
    EXPECT_EQ(cpu.host_pageable - all.host_pageable, 2 * std::accumulate(shards.begin(), shards.end(), int64_t{0}));
    EXPECT_EQ(all.host_pinned - cpu.host_pinned, 2 * (pad(2 * largest) + al));
    // The first two units resident (pageable: pin_memory false), the third
    // one does not fit, so no later one is resident either.
    in.param_max_in_cpu = shards[0] + shards[1] + shards[2] - 1;
    const MemoryEstimateRow part = estimate(in);
    EXPECT_EQ(part.nvme, file - pad(2 * shards[0]) - pad(2 * shards[1]));
    EXPECT_EQ(part.host_pageable, all.host_pageable + 2 * (shards[0] + shards[1]));
    // Everything resident: no file and no read buffers.
    in.param_max_in_cpu = int64_t{1} << 40;
    const MemoryEstimateRow none = estimate(in);
    EXPECT_EQ(none.nvme, 0);
    EXPECT_EQ(none.host(), cpu.host());
  }
}

TEST(Estimator, CheckpointingReducesActivations) {
  for (const ModelDesc& s : {gpt(kGpt2), llama()}) {
    EstimateInput in = input_for(s, 8, 3);
    const MemoryEstimateRow off = estimate(in);
    in.activation_checkpointing = true;
    const MemoryEstimateRow on = estimate(in);
    EXPECT_LT(on.activations * 5, off.activations) << s.shape.name;
    EXPECT_GT(on.workspace, off.workspace) << "one block's stash is recomputed";
    EXPECT_LT(on.total(), off.total());
  }
  // GPT-2: 16C values in the activation dtype (the output C, the stash 15C
  // with GELU's input and output) + (4 + n_head) fp32 per token.
  // The descriptions are kept alive: a reference into the temporary that
  // gpt() returns dangled (heap-use-after-free under the asan preset).
  const ModelDesc gpt2_desc = gpt(kGpt2);
  const UnitActivations& g = gpt2_desc.units[1].act;
  EXPECT_EQ((g.output + g.stash).bytes(2), 16 * 768 * 2 + (4 + 12) * 4);
  // Llama-2 70B: 6.25C + 2F values (qkv C + 2C kv/heads) + (2 + n_head) fp32.
  const ModelDesc llama_desc = llama();
  const UnitActivations& l = llama_desc.units[1].act;
  EXPECT_EQ((l.output + l.stash).bytes(2), 217088 + 264);
}

// The classifier's workspace by the kernels that run it: CpuKernels' 8 MiB of
// f32 rows, the CUDA one pass's chunks of rows of Vp = V rounded up to 8
// classes in the parameter dtype (at most 2 GiB, or the bound
// train.classifier_chunk_mib gives; equal chunks of a multiple of 8 rows)
// with the weight padded to Vp rows and dw's f32 tail, and the separate
// calls' 256 MiB slices (modules/cuda/classifier.cu).
TEST(Estimator, ClassifierWorkspaceOfTheKernelsThatRunIt) {
  EstimateInput in = input_for(gpt(kGpt2), 1, 0);
  const int64_t V = 50257, Vp = 50264, C = 768;
  EXPECT_EQ(classifier_workspace(in, V, C, 8192), (8388608 / (V * 4)) * V * 4);  // 41 rows
  in.classifier = EstimateInput::Classifier::cuda_one_pass;
  const int64_t padded_w = Vp * C * 2 + 8 * C * 4;
  EXPECT_EQ(classifier_workspace(in, V, C, 8192), 8192 * Vp * 2 + padded_w);    // one chunk: 785 MiB of logits
  EXPECT_EQ(classifier_workspace(in, V, C, 16384), 16384 * Vp * 2 + padded_w);  // one chunk: 1.53 GiB
  EXPECT_EQ(classifier_workspace(in, V, C, 32768), 16384 * Vp * 2 + padded_w);  // two of 16384 rows
  EXPECT_EQ(classifier_workspace(in, V, C, 100), 100 * Vp * 2 + padded_w);      // 100 rows, not rounded up
  in.cuda_logits_f32 = true;  // 10682 rows a chunk at most: two of 8192
  EXPECT_EQ(classifier_workspace(in, V, C, 16384), 8192 * Vp * 4 + padded_w);
  in.cuda_logits_f32 = false;
  // Llama 3 (V % 8 == 0): 8372 rows a chunk at most.
  EXPECT_EQ(classifier_workspace(in, 128256, 2048, 8192), 8192 * int64_t{128256} * 2);
  EXPECT_EQ(classifier_workspace(in, 128256, 2048, 16384), 8192 * int64_t{128256} * 2);
  in.param_dtype = DType::f32;  // f32 logits, the weight's copy in f32
  EXPECT_EQ(classifier_workspace(in, V, C, 16384), 8192 * Vp * 4 + Vp * C * 4 + 8 * C * 4);
  in.param_dtype = DType::bf16;
  in.cuda_one_pass_chunk_bytes = int64_t{1} << 30;  // train.classifier_chunk_mib: 1024
  EXPECT_EQ(classifier_workspace(in, V, C, 16384), 8192 * Vp * 2 + padded_w);  // two of 8192 rows
  in.classifier = EstimateInput::Classifier::cuda_separate;
  EXPECT_EQ(classifier_workspace(in, V, C, 8192), int64_t{256} << 20);
  // The estimate's workspace is the head's with the GPU's classifier.
  in.micro_batch = 8;
  in.classifier = EstimateInput::Classifier::cpu_chunks;
  const MemoryEstimateRow cpu = estimate(in);
  in.classifier = EstimateInput::Classifier::cuda_one_pass;
  const MemoryEstimateRow gpu = estimate(in);
  EXPECT_GE(gpu.workspace, 8192 * Vp * 2 + padded_w);
  EXPECT_GT(gpu.workspace, cpu.workspace + 8192 * Vp);
  EXPECT_EQ(gpu.total() - gpu.workspace, cpu.total() - cpu.workspace);
}

// The activations the runner really saves: the saved arena's high-water mark
// with chunks small enough that every allocation gets its own (capacity =
// sum of the live allocations at the end of forward).
TEST(Estimator, ActivationsMatchTheRunner) {
  const GptConfig c{3, 4, 32, 32, 50};
  const int64_t B = 2;
  for (DType dt : {DType::f32, DType::bf16}) {
    // Checkpointing off, then on for the first `layers` blocks ([Note:
    // partial recomputation]; -1 = all of them).
    size_t last_saved = 0;
    for (int layers : {-2, 0, 1, 2, -1}) {
      const bool ckpt = layers != -2;
      auto dev = make_cpu_device();
      const auto units = build_gpt(c);
      const auto views = unit_views(units);
      FlatStore store(*dev, views, dt, 7);
      CpuKernels kernels;
      std::vector<bool> checkpointable;
      for (const Unit* u : views) checkpointable.push_back(u->checkpointable());
      std::vector<int> all(views.size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
      const std::vector<bool> rec = recomputed_units(checkpointable, {all}, ckpt, layers);
      EXPECT_EQ(std::count(rec.begin(), rec.end(), true), !ckpt ? 0 : layers < 0 ? c.n_layer : layers);
      UnitRunner runner(views, kernels, *dev, dt, dt, rec);
      MicroBatchState mb(*dev, static_cast<int>(views.size()), 64);
      Buffer tok(*dev, DType::i32, Shape{B, c.seq_len}, MemTag::activations);
      Buffer tg(*dev, DType::i32, Shape{B, c.seq_len}, MemTag::activations);
      Buffer w(*dev, DType::f32, Shape{B, c.seq_len}, MemTag::activations);
      fill_tokens(tok.tensor(), 1, c.vocab_size);
      fill_tokens(tg.tensor(), 2, c.vocab_size);
      for (int64_t i = 0; i < B * c.seq_len; ++i) w.as<float>()[i] = 1.0f;
      const int L = static_cast<int>(views.size());
      runner.forward(0, L, mb, store, tok.tensor(), tg.tensor());
      const size_t saved = mb.saved.capacity();
      runner.backward(0, L, mb, store, store, w.tensor());

      EstimateInput in = input_for(gpt(c), 1, 0, dt);
      in.micro_batch = B;
      in.activation_checkpointing = ckpt;
      in.recompute_layers = layers;
      const MemoryEstimateRow r = estimate(in);
      const int64_t trainer_buffers = 12 * B * c.seq_len;  // tokens, targets, loss weights
      // The column is the arena chunk the trainer makes of that figure.
      EXPECT_EQ(r.activations - trainer_buffers, arena_chunk_bytes(static_cast<int64_t>(saved)))
          << dtype_name(dt) << (ckpt ? " checkpointed, layers " + std::to_string(layers) : "");
      // Each block more that recomputes keeps less; none is checkpointing off.
      if (layers == 0) {
        EXPECT_EQ(saved, last_saved) << dtype_name(dt);
      } else if (last_saved > 0) {
        EXPECT_LT(saved, last_saved) << dtype_name(dt) << " layers " << layers;
      }
      last_saved = saved;
      EXPECT_EQ(r.micro_batch_activations, static_cast<int64_t>(saved));
      // The CPU kernels' scratch also holds staging copies and per-thread
      // attention buffers that the estimate leaves out; it stays the same order.
      const double scratch = static_cast<double>(mb.scratch.capacity());
      std::printf("%s%s: saved %zu B (estimate %lld), scratch %.0f B (estimate %lld)\n", dtype_name(dt),
                  ckpt ? " ckpt" : "", saved, static_cast<long long>(r.micro_batch_activations), scratch,
                  static_cast<long long>(r.workspace_need));
      EXPECT_GT(scratch, 0.3 * static_cast<double>(r.workspace_need)) << dtype_name(dt);
      EXPECT_EQ(r.workspace, arena_chunk_bytes(r.workspace_need));
    }
  }
}

// Stages given by hand (test_estimator_stages.cpp takes them from the
// partitioner): four stages of 20 Llama blocks, 1F1B's pp - s in flight.
// [Note: device total over the step]: the columns peak at different times.
TEST(Estimator, DeviceTotalFollowsTheStep) {
  const ModelDesc g = gpt(kGpt2);
  const int64_t emb = (50257 + 1024) * 768, layer = g.units[1].numel();  // even: no padding at dp 2
  ASSERT_EQ(emb % 2, 0);
  ASSERT_EQ(layer % 2, 0);
  // Stage 2 on two ranks: the tied embedding's fp32 buffer lives through the
  // backward; each block's buffer and the staging of its reduction (its
  // shard in fp32, 2 bytes per element of the unit) come and go; the
  // updated shards are published from a send buffer (P bytes for P
  // parameters in bf16 over 2 ranks) after the backward. The largest moment
  // is the embedding's own reduction: its buffer and its staging (6 bytes
  // an element), with overlap_comm also the block before's buffer and
  // staging. The columns count instead the embedding's and one block's
  // buffers (two with overlap_comm) and, as communication, the larger of
  // the send buffer and the staging (two with overlap_comm).
  const int64_t P = g.num_params();
  for (bool overlap : {false, true}) {
    EstimateInput in = input_for(g, 2, 2);
    in.overlap_comm = overlap;
    const MemoryEstimateRow r = estimate(in);
    const int nbuf = overlap ? 2 : 1;
    EXPECT_EQ(r.grads, (emb + nbuf * layer + P / 2) * 4) << "the columns: buffers and shard";
    EXPECT_EQ(r.comm, std::max(nbuf * 2 * emb, P));
    const int64_t columns_moving = (emb + nbuf * layer) * 4 + std::max(nbuf * 2 * emb, P);
    const int64_t at_embedding = 6 * emb + (nbuf - 1) * 6 * layer;
    EXPECT_EQ(r.total(), r.columns() - columns_moving + at_embedding) << "overlap_comm " << overlap;
    EXPECT_EQ(r.device_peak_at, "embedding's reduction");
  }
  // Stages 0-1 and pipelines keep the sum of the columns.
  for (int stage : {0, 1}) {
    const MemoryEstimateRow r = estimate(input_for(g, 2, stage));
    EXPECT_EQ(r.total(), r.columns()) << "stage " << stage;
    EXPECT_EQ(r.device_peak_at, "");
  }
  // Stage 3 with both offloads in the capped runs' layout (docs/offload.md,
  // 6.25B: one group of 8 micro-batches, bf16 gradients landing on the
  // host, parameters from the master): the units gathered at the end of the
  // forward are released before the reductions that stage most, so the
  // total is below the columns by most of the parameters' column.
  EstimateInput in = input_for(describe_gpt2(gpt2_shape(GptConfig{30, 32, 4096, 1024, 50304})), 1, 3);
  in.micro_batch = 8;
  in.micro_batches_per_step = 8;
  in.stages = {whole_model(in.model)};
  in.stages[0].in_flight = 8;
  in.offload_optimizer = in.offload_param = "cpu";
  in.optimizer_pin_memory = in.param_pin_memory = true;
  in.param_from_master = true;
  in.host_grad_bytes = 2;
  in.activation_checkpointing = in.cpu_checkpointing = true;
  in.classifier = EstimateInput::Classifier::cuda_one_pass;
  const MemoryEstimateRow r = estimate(in);
  EXPECT_LT(r.total(), r.columns() - r.params / 2);
  // The peak: the fifth block in backward order, whose rounded piece joins
  // the four still landing (as the run's ZTRAIN_MEMORY_PEAKS showed: a
  // block's fp32 staging and five rounded pieces of a block, no block
  // gathered).
  EXPECT_EQ(r.device_peak_at, "h.25's reduction");
  // At the largest moment the tied owner's and one block's buffers, the
  // staging and every constant column count whole.
  EXPECT_GT(r.total(), r.grads + r.activations + r.workspace + r.comm / 2);
  // Measured on the H200 (docs/memory.md): 12.88 GiB; the estimate stays
  // within 10% of it.
  EXPECT_NEAR(static_cast<double>(r.total()) / (int64_t{1} << 30), 12.88, 0.1 * 12.88);
}

TEST(Estimator, PipelineStagesShareTheModel) {
  const ModelDesc s = llama();
  EstimateInput in = input_for(s, 8, 1);
  const MemoryEstimateRow flat = estimate(in);
  in.pp = 4;
  in.dp = 2;
  for (int st = 0; st < 4; ++st) {
    StageContents sc;
    sc.chunks.emplace_back();
    for (int u = (st == 0 ? 0 : 1 + 20 * st); u < 1 + 20 * (st + 1) + (st == 3 ? 1 : 0); ++u)
      sc.chunks.back().push_back(u);
    sc.in_flight = 4 - st;
    in.stages.push_back(sc);
  }
  const std::vector<MemoryEstimateRow> rows = estimate_stages(in);
  ASSERT_EQ(rows.size(), 4u);
  int64_t params = 0;
  for (const MemoryEstimateRow& r : rows) params += r.stage_params;
  EXPECT_EQ(params, flat.num_params);
  const MemoryEstimateRow piped = estimate(in);
  EXPECT_LT(piped.stage_params, flat.num_params / 3);
  EXPECT_GT(piped.stage_params, flat.num_params / 5);
  // Stage 0 keeps pp micro-batches of its quarter of the layers in flight.
  EXPECT_NEAR(static_cast<double>(piped.activations), static_cast<double>(flat.activations), 0.05 * flat.activations);
  EXPECT_EQ(piped.pp_stage, 0);
  // The last stage keeps one micro-batch (its 20 blocks and the head).
  EXPECT_LT(rows[3].activations, rows[0].activations / 3);
  EXPECT_EQ(rows[3].activations, in.micro_batch * 4096 * 12 + arena_chunk_bytes(rows[3].micro_batch_activations));
  EXPECT_LT(rows[0].micro_batch_activations * 3, rows[0].activations);
}

TEST(Estimator, Tables) {
  const std::vector<MemoryEstimateRow> rows = estimate_table(input_for(gpt(kTiny), 2, 0));
  ASSERT_EQ(rows.size(), 13u);
  int unsupported = 0;
  for (const MemoryEstimateRow& r : rows) unsupported += r.supported ? 0 : 1;
  EXPECT_EQ(unsupported, 2);  // stage 0 with offload
  const std::string t = llama2_70b_table(8);
  EXPECT_NE(t.find("68,976,648,192 parameters (68.98 B)"), std::string::npos) << t;
  EXPECT_NE(t.find("activation checkpointing off"), std::string::npos);
  EXPECT_NE(t.find("activation checkpointing on"), std::string::npos);
  std::printf("%s", t.c_str());
}

}  // namespace
}  // namespace zt::test
