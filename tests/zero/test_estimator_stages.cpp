// The estimator's pipeline stages are the trainer's: estimate_input
// (train/memory_estimate.hpp) hands the estimator each stage's units as
// plan_stage places them (pipeline.num_chunks, pipeline.partition, the tie
// mirror) and its pairs in flight as max_in_flight counts them
// (pipeline.pipe_schedule_name). The layer counts are ones where the
// estimator's former even split (earlier stages taking the remainder, chunks
// ignored, a copy of wte alone on the last stage) gave other stages.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/schedule.hpp"
#include "train/memory_estimate.hpp"

namespace zt::test {
namespace {

struct Layout {
  int n_layer, P, V;
  std::string partition, schedule;
  int M;             // micro-batches per step (gradient accumulation)
  int vocab = 256;   // 4096: an embedding of about 5 blocks, which the parameters partition weighs
};

Config config_for(const Layout& l) {
  const nlohmann::json j = {
      {"train_micro_batch_size_per_gpu", 2},
      {"gradient_accumulation_steps", l.M},
      {"bf16", {{"enabled", true}}},
      {"zero_optimization", {{"stage", 1}}},
      {"pipeline",
       {{"parallel_size", l.P}, {"num_chunks", l.V}, {"partition", l.partition}, {"pipe_schedule_name", l.schedule}}},
      {"model", {{"n_layer", l.n_layer}, {"n_head", 4}, {"d_model", 64}, {"seq_len", 32}, {"vocab_size", l.vocab}}}};
  return parse_config(j, "stages.json");
}

// The blocks of stage s of P as the former estimator split them: evenly,
// earlier stages taking the remainder, whatever the chunks.
std::vector<int> former_split_blocks(int n_layer, int P, int s) {
  const int q = n_layer / P, r = n_layer % P;
  const int b0 = s * q + std::min(s, r), b1 = b0 + q + (s < r ? 1 : 0);
  std::vector<int> blocks;
  for (int b = b0; b < b1; ++b) blocks.push_back(b);
  return blocks;
}

TEST(EstimatorStages, AreThePartitionersStages) {
  for (int n_layer : {5, 7})
    for (int P : {2, 3})
      for (int V : {1, 2})
        for (const char* partition : {"uniform", "parameters"}) {
          if (P * V > n_layer) continue;
          const Layout l{n_layer, P, V, partition, V == 1 ? "1f1b" : "interleaved", 2 * P};
          const Config cfg = config_for(l);
          const EstimateInput in = estimate_input(cfg, P);
          const ModelDesc m = describe_model(cfg.model);
          ASSERT_EQ(in.stages.size(), static_cast<size_t>(P));
          const std::vector<MemoryEstimateRow> rows = estimate_stages(in);
          const std::string what = "L " + std::to_string(n_layer) + " P " + std::to_string(P) + " V " +
                                   std::to_string(V) + " " + partition;
          bool former_differs = false;
          for (int s = 0; s < P; ++s) {
            const StagePlan plan =
                plan_stage(m.unit_numels(), m.unit_ties(), P, V, partition_kind_from_name(partition), s);
            const StageContents& sc = in.stages[static_cast<size_t>(s)];
            EXPECT_EQ(sc.units(), plan.units()) << what << " stage " << s;
            EXPECT_EQ(sc.mirror, plan.mirror) << what << " stage " << s;
            ASSERT_EQ(sc.chunks.size(), static_cast<size_t>(V));
            std::vector<int> blocks;
            for (int c = 0; c < V; ++c) {
              const UnitRange r = plan.chunks[static_cast<size_t>(c * P + s)];
              const std::vector<int>& chunk = sc.chunks[static_cast<size_t>(c)];
              EXPECT_EQ(chunk.front(), r.first) << what << " stage " << s << " chunk " << c;
              EXPECT_EQ(chunk.back(), r.last - 1) << what << " stage " << s << " chunk " << c;
              for (int u : chunk)
                if (m.units[static_cast<size_t>(u)].kind == UnitKind::block) blocks.push_back(u - 1);
            }
            EXPECT_EQ(sc.in_flight, max_in_flight(schedule_kind_from_name(l.schedule), P, V, l.M, s)) << what;
            int64_t held = 0;
            for (int u : plan.units()) held += m.units[static_cast<size_t>(u)].numel();
            EXPECT_EQ(rows[static_cast<size_t>(s)].stage_params, held) << what << " stage " << s;
            former_differs = former_differs || blocks != former_split_blocks(n_layer, P, s);
          }
          EXPECT_TRUE(former_differs) << what << ": the former split gave the same blocks; pick another layout";
        }
}

// Uniform and parameters partitions of 7 layers on 2 stages cut elsewhere
// when the embedding is large, and the estimate follows the cut.
TEST(EstimatorStages, PartitionChangesTheStages) {
  Layout l{7, 2, 1, "uniform", "1f1b", 4, 4096};
  const EstimateInput uniform = estimate_input(config_for(l), 2);
  l.partition = "parameters";
  const EstimateInput parameters = estimate_input(config_for(l), 2);
  EXPECT_NE(uniform.stages[0].units(), parameters.stages[0].units());
  EXPECT_NE(estimate_stages(uniform)[0].stage_params, estimate_stages(parameters)[0].stage_params);
}

// The pairs in flight are the schedule's: GPipe keeps all M micro-batches,
// 1F1B P - s, interleaved its warm-up plus one; the activations scale with them.
TEST(EstimatorStages, ScheduleSetsTheMicroBatchesInFlight) {
  const int P = 2, M = 4;
  Layout l{6, P, 1, "uniform", "1f1b", M};
  const std::vector<MemoryEstimateRow> one_f_one_b = estimate_stages(estimate_input(config_for(l), P));
  l.schedule = "gpipe";
  const std::vector<MemoryEstimateRow> gpipe = estimate_stages(estimate_input(config_for(l), P));
  for (int s = 0; s < P; ++s) {
    EXPECT_EQ(gpipe[static_cast<size_t>(s)].activations * (P - s), one_f_one_b[static_cast<size_t>(s)].activations * M)
        << "stage " << s;
    EXPECT_EQ(gpipe[static_cast<size_t>(s)].stage_params, one_f_one_b[static_cast<size_t>(s)].stage_params);
  }
  l.schedule = "interleaved";
  l.V = 2;
  const EstimateInput inter = estimate_input(config_for(l), P);
  EXPECT_EQ(inter.stages[0].chunks.size(), 2u);
  EXPECT_EQ(inter.stages[0].in_flight, max_in_flight(ScheduleKind::interleaved, P, 2, M, 0));
  EXPECT_NE(estimate_stages(inter)[0].activations, one_f_one_b[0].activations);
}

// train.classifier_chunk_mib reaches the estimator as the bound of every
// classifier path; absent, each keeps its kernels' default.
TEST(EstimatorInput, ClassifierChunkBound) {
  Config cfg = config_for(Layout{2, 1, 1, "uniform", "1f1b", 1});
  for (bool gpu : {false, true}) {
    const EstimateInput d = estimate_input(cfg, 1, gpu);
    EXPECT_EQ(d.classifier_chunk_bytes, int64_t{8} << 20);
    EXPECT_EQ(d.cuda_one_pass_chunk_bytes, int64_t{2} << 30);
    EXPECT_EQ(d.cuda_separate_chunk_bytes, int64_t{256} << 20);
  }
  cfg.train.classifier_chunk_mib = 0.5;
  for (bool gpu : {false, true}) {
    const EstimateInput in = estimate_input(cfg, 1, gpu);
    EXPECT_EQ(in.classifier_chunk_bytes, 524288);
    EXPECT_EQ(in.cuda_one_pass_chunk_bytes, 524288);
    EXPECT_EQ(in.cuda_separate_chunk_bytes, 524288);
  }
  EXPECT_EQ(classifier_chunk_bytes(1e-9), 1);  // at least a byte
}

}  // namespace
}  // namespace zt::test
