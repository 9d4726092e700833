// ZeroEngine under MPI: every stage initialises the same model, the
// whole-model gather returns it unit by unit, owned shards cover every element
// exactly once, and stage 3 respects its live-parameter cap while producing
// the same gradients as stage 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "comm/topology.hpp"
#include "modules/cpu_kernels.hpp"
#include "modules/gpt.hpp"
#include "modules/runner.hpp"
#include "optim/device_adamw.hpp"
#include "optim/offload_adamw.hpp"
#include "zero/zero_engine.hpp"

using namespace zt;

namespace {

struct Fixture {
  GptConfig cfg{2, 2, 22, 16, 64};
  std::vector<std::unique_ptr<Unit>> owned = build_gpt(cfg);
  std::vector<const Unit*> units;
  CpuDevice dev;
  CpuKernels kernels;
  Topology topo{1};
  std::unique_ptr<OptimizerPlacement> adamw = make_device_adamw(dev, AdamWParams{0.5, 0.9, 0.95, 1e-8, 0.1});
  Fixture() {
    for (auto& u : owned) units.push_back(u.get());
  }
  std::unique_ptr<ZeroEngine> engine(int stage, int64_t max_live = 1000000000, int64_t reuse = 1000000000,
                                     OptimizerPlacement* placement = nullptr, int micro_batches = 1) {
    ZeroOptions o;
    o.stage = stage;
    o.micro_batches = micro_batches;
    o.reduce_bucket_size = 1500;
    o.allgather_bucket_size = 2500;
    o.param_persistence_threshold = 50;
    o.max_live_parameters = max_live;
    o.max_reuse_distance = reuse;
    o.prefetch_bucket_size = 100000;
    auto e = std::make_unique<ZeroEngine>(units, o, dev, kernels, topo.dp(), topo.dp(),
                                          placement != nullptr ? *placement : *adamw);
    e->init_params(7);
    return e;
  }
  // fp32 flat parameters of the whole model, by whole-model gather.
  std::vector<float> gather_all(ZeroEngine& e) {
    std::vector<float> all;
    e.for_each_full_unit([&](int u, const float* full) {
      all.insert(all.end(), full, full + e.layout().unit(u).numel);
    });
    return all;
  }
  // One micro-batch forward and backward; returns the loss sum. The batch
  // differs by rank so that the reduction matters.
  double step(ZeroEngine& e, int micro = 1, bool poison = false) {
    UnitRunner runner(units, kernels, dev, DType::f32, DType::f32, false);
    MicroBatchState mb(dev, static_cast<int>(units.size()), 1 << 16);
    const int64_t B = 2, T = 16;
    std::vector<int32_t> x(B * T), y(B * T);
    for (int64_t i = 0; i < B * T; ++i) {
      x[i] = static_cast<int32_t>((i * 7 + topo.dp_rank() * 13) % cfg.vocab_size);
      y[i] = static_cast<int32_t>((i * 5 + 3 + topo.dp_rank()) % cfg.vocab_size);
    }
    std::vector<float> dloss(B * T, 1.0f / (B * T));
    e.zero_grads();
    if (poison) poison_overwritten(e);
    const int L = static_cast<int>(units.size());
    double sum = 0;
    for (int k = 0; k < micro; ++k) {  // the same batch again: gradient accumulation
      Tensor loss = runner.forward(0, L, mb, e, Tensor(x.data(), DType::i32, Shape{B, T}),
                                   Tensor(y.data(), DType::i32, Shape{B, T}));
      for (int64_t i = 0; i < B * T; ++i) sum += loss.as<float>()[i];
      runner.backward(0, L, mb, e, e, Tensor(dloss.data(), DType::f32, Shape{B, T}));
    }
    e.reduce_gradients();
    return sum;
  }
  // [Note: gradients written, not zeroed]: NaN in every gradient that
  // zero_grads left for the backward to write, as a buffer that was not
  // cleared may hold anything. Returns how many elements.
  int64_t poison_overwritten(ZeroEngine& e) {
    int64_t n = 0;
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      if (!e.grads_fresh(u)) continue;
      const std::vector<Tensor> g = e.grads(u);
      const std::vector<ParamSlot>& slots = e.layout().unit(u).params;
      for (size_t p = 0; p < slots.size(); ++p) {
        if (!slots[p].grad_overwritten) continue;
        std::fill_n(g[p].as<float>(), g[p].numel(), std::nanf(""));
        n += g[p].numel();
      }
    }
    return n;
  }
  double grad_sq(ZeroEngine& e) {
    double sq = 0;
    for (const OwnedShard& s : e.owned_shards())
      for (int64_t i = 0; i < s.numel(); ++i) sq += static_cast<double>(s.grad_f32()[i]) * s.grad_f32()[i];
    return e.reduce_owned_sum(sq);
  }
};

}  // namespace

TEST(ZeroEngine, EveryStageInitialisesAndGathersTheSameModel) {
  Fixture f;
  auto ref = f.engine(0);
  const std::vector<float> expect = f.gather_all(*ref);
  ASSERT_EQ(static_cast<int64_t>(expect.size()), ref->layout().total_numel());
  for (int stage = 1; stage <= 3; ++stage) {
    auto e = f.engine(stage);
    EXPECT_EQ(f.gather_all(*e), expect) << "stage " << stage;
  }
}

TEST(ZeroEngine, OwnedShardsCoverEveryElementOnce) {
  Fixture f;
  for (int stage = 0; stage <= 3; ++stage) {
    auto e = f.engine(stage);
    double local = 0;
    int64_t count = 0;
    for (const OwnedShard& s : e->owned_shards()) {
      count += s.numel();
      for (int64_t i = 0; i < s.numel(); ++i) local += s.master[i];
    }
    double total = 0;
    for (float v : f.gather_all(*e)) total += v;
    EXPECT_NEAR(e->reduce_owned_sum(local), total, 1e-3 * (1 + std::fabs(total))) << "stage " << stage;
    const int64_t all = static_cast<int64_t>(e->reduce_owned_sum(static_cast<double>(count)));
    EXPECT_EQ(all, e->layout().total_padded() * (stage == 0 ? 1 : 1)) << "stage " << stage;
  }
}

TEST(ZeroEngine, GradientsOfEveryStageMatchStageZero) {
  Fixture f;
  auto ref = f.engine(0);
  const double loss0 = f.step(*ref);
  const double g0 = f.grad_sq(*ref);
  for (int stage = 1; stage <= 3; ++stage) {
    auto e = f.engine(stage);
    EXPECT_NEAR(f.step(*e), loss0, 1e-9 * std::fabs(loss0)) << "stage " << stage;
    EXPECT_NEAR(f.grad_sq(*e), g0, 1e-5 * g0) << "stage " << stage;
  }
}

TEST(ZeroEngine, StageThreeRespectsTheLiveParameterCap) {
  Fixture f;
  int64_t largest = 0;
  auto probe = f.engine(0);
  for (int u = 0; u < probe->layout().num_units(); ++u)
    largest = std::max(largest, probe->layout().unit(u).padded);
  // Without reuse and with a cap of one unit plus the tied embedding, no more
  // than that is ever gathered; with the defaults the whole model stays
  // gathered between forward and backward.
  const int64_t embedding = probe->layout().unit(0).padded;
  auto capped = f.engine(3, largest + embedding, 0);
  f.step(*capped);
  EXPECT_LE(capped->peak_live_gathered(), largest + embedding);
  EXPECT_EQ(capped->live_gathered(), 0);
  auto roomy = f.engine(3);
  f.step(*roomy);
  EXPECT_GT(roomy->peak_live_gathered(), largest + embedding);
  capped->publish_params();
  EXPECT_EQ(capped->live_gathered(), 0);
}

// The optimizer placement seam: apply_optimizer hands every owned shard to
// the placement once, with the step's scalars, then finishes it; the device
// AdamW placement updates each decay span exactly as adamw_update does.
namespace {
struct RecordingPlacement final : public OptimizerPlacement {
  const char* name() const override { return "recording"; }
  bool states_on_device() const override { return true; }
  void read_state(const OwnedShard& sh, OptimizerState, float* dst) override {
    std::copy(sh.master, sh.master + sh.numel(), dst);
  }
  void write_state(const OwnedShard& sh, OptimizerState, const float* src) override {
    std::copy(src, src + sh.numel(), sh.master);
  }
  void update(const OwnedShard& sh, const OptimizerStepScalars& s) override {
    EXPECT_EQ(finished, 0) << "update after finish";
    units.push_back(sh.unit);
    elements += sh.numel();
    last = s;
  }
  void finish() override { ++finished; }
  std::vector<int> units;
  int64_t elements = 0;
  int finished = 0;
  OptimizerStepScalars last;
};
}  // namespace

TEST(ZeroEngine, ApplyOptimizerHandsEveryOwnedShardToThePlacement) {
  Fixture f;
  for (int stage = 0; stage <= 3; ++stage) {
    RecordingPlacement p;
    auto e = f.engine(stage, 1000000000, 1000000000, &p);
    e->apply_optimizer(OptimizerStepScalars{3, 0.25, 0.5f});
    std::vector<int> want;
    int64_t owned = 0;
    for (const OwnedShard& s : e->owned_shards()) {
      want.push_back(s.unit);
      owned += s.numel();
    }
    EXPECT_EQ(p.units, want) << "stage " << stage;
    EXPECT_EQ(p.elements, owned);
    EXPECT_EQ(p.finished, 1);
    EXPECT_EQ(p.last.step, 3);
    EXPECT_EQ(p.last.lr, 0.25);
    EXPECT_EQ(p.last.grad_scale, 0.5f);
  }
}

TEST(ZeroEngine, DeviceAdamWPlacementEqualsAdamWPerDecaySpan) {
  Fixture f;
  for (int stage : {0, 2}) {
    auto e = f.engine(stage);
    f.step(*e);
    // Reference: a copy of every shard updated span by span with adamw_update.
    const AdamWParams hp{0.5, 0.9, 0.95, 1e-8, 0.1};
    std::vector<std::vector<float>> ref;
    for (const OwnedShard& s : e->owned_shards()) {
      std::vector<float> p(s.master, s.master + s.numel()), m(s.exp_avg, s.exp_avg + s.numel()),
          v(s.exp_avg_sq, s.exp_avg_sq + s.numel());
      for (const DecaySpan& span : s.spans) {
        const int64_t off = span.begin - s.begin;
        AdamWParams h = hp;
        h.lr = 0.01;
        adamw_update(p.data() + off, s.grad_f32() + off, m.data() + off, v.data() + off, span.end - span.begin, h, 1, 0.75f,
                     span.decay);
      }
      ref.push_back(p);
    }
    e->apply_optimizer(OptimizerStepScalars{1, 0.01, 0.75f});
    size_t i = 0;
    for (const OwnedShard& s : e->owned_shards())
      EXPECT_EQ(std::vector<float>(s.master, s.master + s.numel()), ref[i++]) << "stage " << stage << " unit " << s.unit;
  }
}

// [Note: gradients written, not zeroed]: at stages 0-1 zero_grads leaves the
// block weights' gradients for their products to write at each unit's first
// backward of the step. A step taken after another one (whose gradients are
// still in the buffer), with the gradients left to the products set to NaN
// after zero_grads (what an uncleared buffer might hold), gives, for one and
// two micro-batches, the gradients of the same step taken on a fresh
// engine, whose buffer starts zero: a span zero_grads should clear but does
// not keeps the first step's sums, and a product that adds where it should
// write keeps the NaN.
TEST(ZeroEngine, OverwrittenGradientsNeedNoClearing) {
  Fixture f;
  for (int stage : {0, 1}) {
    for (int micro : {1, 2}) {
      auto ref = f.engine(stage);
      auto e = f.engine(stage);
      const double ref_loss = f.step(*ref, micro);
      f.step(*e, micro);  // the same step once before: no update, the same gradients again
      e->zero_grads();
      EXPECT_GT(f.poison_overwritten(*e), 0) << "stage " << stage << ": no gradient is left to its product";
      const double loss = f.step(*e, micro, true);
      EXPECT_EQ(loss, ref_loss);
      ASSERT_EQ(e->owned_shards().size(), ref->owned_shards().size());
      for (size_t i = 0; i < e->owned_shards().size(); ++i) {
        const OwnedShard& a = e->owned_shards()[i];
        const OwnedShard& b = ref->owned_shards()[i];
        EXPECT_EQ(std::vector<float>(a.grad_f32(), a.grad_f32() + a.numel()), std::vector<float>(b.grad_f32(), b.grad_f32() + b.numel()))
            << "stage " << stage << " micro-batches " << micro << " unit " << a.unit;
      }
    }
  }
}

// [Note: working copy from the update]: with bf16 working parameters, the
// device AdamW writes each shard's working copy in its pass (stage 0 and
// stage 3; stages 1-2 cast it at the publish), and publish_params casts only
// when something other than the update changed the master. After an update,
// and again after write_state(master) with values the update never made,
// every unit's gathered working parameters are the master rounded to bf16.
TEST(ZeroEngine, WorkingCopyFromTheUpdateIsTheRoundedMaster) {
  Fixture f;
  for (int stage = 0; stage <= 3; ++stage) {
    ZeroOptions o;
    o.stage = stage;
    o.param_dtype = DType::bf16;
    o.reduce_bucket_size = 1500;
    o.allgather_bucket_size = 2500;
    o.param_persistence_threshold = 50;
    o.prefetch_bucket_size = 100000;
    ZeroEngine e(f.units, o, f.dev, f.kernels, f.topo.dp(), f.topo.dp(), *f.adamw);
    e.init_params(7);
    const auto check = [&](const char* when) {
      std::vector<std::vector<float>> master(f.units.size());
      e.for_each_full_unit([&](int u, const float* full) {
        master[static_cast<size_t>(u)].assign(full, full + e.layout().unit(u).numel);
      });
      int64_t bad = 0, seen = 0;
      for (int u = 0; u < static_cast<int>(f.units.size()); ++u) {
        const std::vector<Tensor> w = e.acquire(u, Phase::forward);
        const std::vector<ParamSlot>& slots = e.layout().unit(u).params;
        // The unit's own parameters come first (tied ones after them).
        EXPECT_GE(w.size(), slots.size());
        for (size_t p = 0; p < std::min(w.size(), slots.size()); ++p) {
          EXPECT_EQ(w[p].dtype, DType::bf16);
          if (w[p].dtype != DType::bf16) continue;
          const bf16* got = w[p].as<bf16>();
          for (int64_t i = 0; i < slots[p].numel(); ++i, ++seen) {
            const bf16 want = from_f32<bf16>(master[static_cast<size_t>(u)][static_cast<size_t>(slots[p].offset + i)]);
            if (std::memcmp(&got[i], &want, sizeof want) != 0) ++bad;
          }
        }
        e.release(u, Phase::forward);
      }
      EXPECT_GT(seen, 0);
      EXPECT_EQ(bad, 0) << "stage " << stage << ", " << when;
    };
    for (const OwnedShard& sh : e.owned_shards()) {
      EXPECT_EQ(sh.param != nullptr, stage == 0 || stage == 3) << "stage " << stage << " unit " << sh.unit;
      for (int64_t i = 0; i < sh.numel(); ++i) sh.grad_f32()[i] = 0.01f * static_cast<float>((i * 37 + sh.unit) % 101 - 50);
    }
    e.apply_optimizer(OptimizerStepScalars{1, 0.05, 1.0f});
    // Stage 0 reads the working buffer the update wrote: no publish needed.
    if (stage == 0) check("after the update, before the publish");
    e.publish_params();
    check("after the update");
    for (const OwnedShard& sh : e.owned_shards()) {
      std::vector<float> m(static_cast<size_t>(sh.numel()));
      for (int64_t i = 0; i < sh.numel(); ++i) m[static_cast<size_t>(i)] = 0.125f + 1e-3f * static_cast<float>(i % 977);
      e.placement().write_state(sh, OptimizerState::master, m.data());
    }
    e.publish_params();
    check("after write_state(master)");
  }
}

// [Note: norm on the device]: with the optimizer offloaded, a shard whose
// gradient lands in one piece once a step gets its sum of squares from the
// device, with the bits the host's sum of the landed gradient has; a shard
// cut into pieces (a small reduce bucket) is left to the host.
TEST(ZeroEngine, ShardNormsOnTheDeviceEqualTheHostSums) {
  Fixture f;
  for (const int64_t bucket : {int64_t{1} << 30, int64_t{500}}) {
    auto host = make_host_offload_adamw(f.dev, AdamWParams{0.5, 0.9, 0.95, 1e-8, 0.1}, HostOffloadOptions{});
    ZeroOptions o;
    o.stage = 2;
    o.reduce_bucket_size = bucket;
    ZeroEngine e(f.units, o, f.dev, f.kernels, f.topo.dp(), f.topo.dp(), *host);
    e.init_params(7);
    ASSERT_TRUE(e.grads_on_host());
    f.step(e);
    std::vector<double> sq;
    std::vector<bool> have;
    const bool any = e.landed_shard_sq(sq, have);
    bool any_whole = false, any_cut = false;
    for (const OwnedShard& s : e.owned_shards()) {
      const bool whole = s.numel() <= bucket / f.topo.dp().size();
      any_whole = any_whole || whole;
      any_cut = any_cut || !whole;
      EXPECT_EQ(have[static_cast<size_t>(s.index)], whole) << "unit " << s.unit << " bucket " << bucket;
      if (!have[static_cast<size_t>(s.index)]) continue;
      double acc = 0;
      f.kernels.sum_squares(Tensor(s.grad, DType::f32, Shape{s.numel()}), Tensor(&acc, DType::f64, Shape{1}));
      EXPECT_EQ(sq[static_cast<size_t>(s.index)], acc) << "unit " << s.unit;
      EXPECT_GT(acc, 0.0) << "unit " << s.unit;
    }
    EXPECT_EQ(any, any_whole);
    EXPECT_EQ(any_cut, bucket == 500);  // the small bucket cuts some shard
    e.forget_landed_sq(e.owned_shards().front().unit);
    e.landed_shard_sq(sq, have);
    EXPECT_FALSE(have.front());
  }
}

// [Note: streamed update]: finish() returns before the host update is done;
// every parameter the engine hands out afterwards is the updated one, the
// same as the device AdamW's, at stages 1-3.
TEST(ZeroEngine, StreamedUpdateGivesTheParametersOfTheDeviceUpdate) {
  Fixture f;
  for (int stage = 1; stage <= 3; ++stage) {
    auto ref = f.engine(stage);
    f.step(*ref);
    ref->apply_optimizer(OptimizerStepScalars{1, 0.01, 0.75f});
    ref->publish_params();
    auto host = make_host_offload_adamw(f.dev, AdamWParams{0.5, 0.9, 0.95, 1e-8, 0.1}, HostOffloadOptions{});
    auto e = f.engine(stage, 1000000000, 1000000000, host.get());
    f.step(*e);
    e->apply_optimizer(OptimizerStepScalars{1, 0.01, 0.75f});
    e->publish_params();
    for (int u = 0; u < static_cast<int>(f.units.size()); ++u) {
      const std::vector<Tensor> a = ref->acquire(u, Phase::forward), b = e->acquire(u, Phase::forward);
      ASSERT_EQ(a.size(), b.size());
      for (size_t p = 0; p < a.size(); ++p)
        EXPECT_EQ(0, std::memcmp(a[p].data, b[p].data, a[p].bytes())) << "stage " << stage << " unit " << u;
      ref->release(u, Phase::forward);
      e->release(u, Phase::forward);
    }
    EXPECT_EQ(f.gather_all(*e), f.gather_all(*ref)) << "stage " << stage;
  }
}

// [Note: gradients on the host]: accumulated pieces are added on the
// landing's thread in landing order: the owned gradients have the bits of
// the device's adds, and a unit that landed more than once has the sum of
// squares of its last add, with the bits of the host's sum of the shard
// ([Note: host sums of squares]); a shard cut into pieces has none.
TEST(ZeroEngine, HostAddsOfLandedPiecesEqualTheDeviceAdds) {
  Fixture f;
  for (int stage : {2, 3}) {
    auto ref = f.engine(stage);
    f.step(*ref, 3);
    auto host = make_host_offload_adamw(f.dev, AdamWParams{0.5, 0.9, 0.95, 1e-8, 0.1}, HostOffloadOptions{});
    auto e = f.engine(stage, 1000000000, 1000000000, host.get(), 3);
    ASSERT_TRUE(e->grads_on_host());
    f.step(*e, 3);
    ASSERT_EQ(ref->owned_shards().size(), e->owned_shards().size());
    for (size_t i = 0; i < e->owned_shards().size(); ++i) {
      const OwnedShard &a = ref->owned_shards()[i], &b = e->owned_shards()[i];
      EXPECT_EQ(0, std::memcmp(a.grad, b.grad, static_cast<size_t>(a.numel()) * sizeof(float)))
          << "stage " << stage << " unit " << a.unit;
    }
    std::vector<double> sq;
    std::vector<bool> have;
    e->landed_shard_sq(sq, have);
    bool any_whole = false, any_cut = false;
    for (const OwnedShard& s : e->owned_shards()) {
      const bool whole = s.numel() <= 1500 / f.topo.dp().size();  // the fixture's reduce bucket
      any_whole = any_whole || whole;
      any_cut = any_cut || !whole;
      EXPECT_EQ(have[static_cast<size_t>(s.index)], whole) << "stage " << stage << " unit " << s.unit;
      if (!whole) continue;
      double acc = 0;
      f.kernels.sum_squares(Tensor(s.grad, DType::f32, Shape{s.numel()}), Tensor(&acc, DType::f64, Shape{1}));
      EXPECT_EQ(sq[static_cast<size_t>(s.index)], acc) << "stage " << stage << " unit " << s.unit;
      EXPECT_GT(acc, 0.0);
    }
    EXPECT_TRUE(any_whole && any_cut) << "stage " << stage;
  }
}
