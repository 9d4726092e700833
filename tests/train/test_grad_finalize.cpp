// GradientFinalizer under MPI on 1, 2 and 4 ranks, with and without a
// pipeline: gradients with a closed-form sum over the ranks give the closed-
// form global norm and clipping scale at every ZeRO stage; a stop requested
// by one rank is agreed by all; an fp16 overflow on one rank skips the step
// everywhere and halves the scale.
#include <cmath>
#include <limits>

#include "modules/gpt.hpp"
#include "optim/clip.hpp"
#include "optim/device_adamw.hpp"
#include "pipeline/partition.hpp"
#include "train/grad_finalize.hpp"
#include "train_test_util.hpp"

namespace zt {
namespace {

// The value rank r contributes to element e of a unit's gradient; the sum
// over the data-parallel ranks is 0.001 (e % 97 + 1) dp (dp + 1) / 2.
float contribution(int rank, int64_t e) { return 0.001f * static_cast<float>(e % 97 + 1) * static_cast<float>(rank + 1); }

// One rank's stage of a tiny GPT under ZeRO, set up as the trainer does.
struct Stage {
  Stage(int pp, int zero_stage, bool fp16 = false)
      : rank(pp), cfg(test::small_config("unused", {"zero_optimization.stage=" + std::to_string(zero_stage),
                                                     std::string("fp16.enabled=") + (fp16 ? "true" : "false"), "fp16.hysteresis=1"},
                                          pp)),
        opts(run_options(cfg, rank.topo.dp_size(), pp)) {
    owned = build_gpt(GptConfig{cfg.model.n_layer, cfg.model.n_head, cfg.model.d_model, cfg.model.seq_len,
                                cfg.model.vocab_size});
    std::vector<int64_t> params;
    std::vector<std::vector<int>> ties;
    for (const auto& u : owned) {
      units.push_back(u.get());
      params.push_back(0);
      for (const ParamSpec& p : u->params()) params.back() += p.shape.numel();
      ties.emplace_back();
      for (const TiedParam& t : u->tied()) ties.back().push_back(t.unit);
    }
    plan = plan_stage(params, ties, pp, 1, PartitionKind::uniform, rank.topo.pp_rank());
    placement = make_device_adamw(rank.dev, opts.adamw);
    zero = std::make_unique<ZeroEngine>(units, opts.zero, rank.dev, rank.kernels, *rank.comms.data().tensors,
                                        *rank.comms.data().host, *placement, plan.local);
    zero->init_params(1);
    finalizer = std::make_unique<GradientFinalizer>(*zero, rank.kernels, rank.dev, rank.comms, units, plan.mirror,
                                                    opts, InjectedFault{});
  }
  // Every local unit's backward hands over gradients with closed-form sums.
  void backward() {
    zero->zero_grads();
    const int r = rank.topo.dp_rank();
    for (int u = static_cast<int>(units.size()) - 1; u >= 0; --u) {
      if (!plan.local[u] || u == plan.mirror) continue;
      const std::vector<Tensor> g = zero->grads(u);
      int64_t e = 0;
      for (size_t p = 0; p < units[u]->params().size(); ++p) {  // own parameters, in flat order
        float* x = static_cast<float*>(g[p].data);
        for (int64_t i = 0; i < g[p].numel(); ++i, ++e) x[i] += contribution(r, e);
      }
      zero->done(u);
    }
  }
  // The norm these gradients must have: every unit once, summed over dp.
  double expected_norm() const {
    const int dp = rank.topo.dp_size();
    double sq = 0;
    for (const Unit* u : units) {
      int64_t e = 0;
      for (const ParamSpec& p : u->params())
        for (int64_t i = 0; i < p.shape.numel(); ++i, ++e) {
          double v = 0;
          for (int r = 0; r < dp; ++r) v += contribution(r, e);
          sq += v * v;
        }
    }
    return std::sqrt(sq);
  }
  test::CpuRank rank;
  Config cfg;
  RunOptions opts;
  std::vector<std::unique_ptr<Unit>> owned;
  std::vector<const Unit*> units;
  StagePlan plan;
  std::unique_ptr<OptimizerPlacement> placement;  // outlives zero
  std::unique_ptr<ZeroEngine> zero;
  std::unique_ptr<GradientFinalizer> finalizer;
};

std::vector<int> pipeline_sizes() {
  std::vector<int> out{1};
  if (test::world_size() % 2 == 0) out.push_back(2);
  return out;
}

TEST(GradientFinalizer, NormAndClippingMatchTheClosedForm) {
  for (int pp : pipeline_sizes())
    for (int zs = 0; zs <= 3; ++zs) {
      SCOPED_TRACE(detail::concat("pp ", pp, " ZeRO stage ", zs));
      Stage s(pp, zs);
      s.backward();
      const GradientVerdict v = s.finalizer->finalize(1, false);
      const double norm = s.expected_norm();
      EXPECT_NEAR(v.grad_norm, norm, 1e-6 * norm);
      EXPECT_FLOAT_EQ(v.grad_scale, clip_coefficient(v.grad_norm, 0.5));
      EXPECT_LT(v.grad_scale, 1.0f);  // clipping is active here
      EXPECT_FALSE(v.skipped);
      EXPECT_FALSE(v.stop);
    }
}

// [Note: stop agreement]: the flag of one rank reaches every rank through the
// norm's reduction, whichever rank and layout.
TEST(GradientFinalizer, StopRequestedByOneRankIsAgreedByAll) {
  const int world = test::world_size();
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  for (int pp : pipeline_sizes())
    for (int zs : {0, 2})
      for (int asker = 0; asker < world; ++asker) {
        SCOPED_TRACE(detail::concat("pp ", pp, " ZeRO stage ", zs, ", rank ", asker, " asks"));
        Stage s(pp, zs);
        s.backward();
        EXPECT_TRUE(s.finalizer->finalize(1, me == asker).stop);
        s.backward();
        EXPECT_FALSE(s.finalizer->finalize(2, false).stop);
      }
}

TEST(GradientFinalizer, Fp16OverflowOnOneRankSkipsTheStepEverywhere) {
  for (int pp : pipeline_sizes()) {
    SCOPED_TRACE(detail::concat("pp ", pp));
    Stage s(pp, 2, true);
    const double scale = s.finalizer->loss_scale();
    s.backward();
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me == test::world_size() - 1) s.zero->owned_shards().front().grad_f32()[0] = std::numeric_limits<float>::infinity();
    const GradientVerdict v = s.finalizer->finalize(1, false);
    EXPECT_TRUE(v.skipped);
    EXPECT_EQ(v.loss_scale, scale);
    EXPECT_EQ(s.finalizer->loss_scale(), scale / 2);
    s.backward();
    EXPECT_FALSE(s.finalizer->finalize(2, false).skipped);
  }
}

}  // namespace
}  // namespace zt
