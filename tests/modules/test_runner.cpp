// UnitRunner and model-level behaviour in f32/bf16: checkpointing is exact and
// saves memory, ranges chain, steady-state steps allocate nothing, the
// classifier never holds (B, T, V) logits, bf16 tracks f32, and the GPT-2
// initialisation and parameter count.
#include <cmath>
#include <cstdio>

#include "module_test_support.hpp"
#include "modules/model.hpp"

namespace zt::test {
namespace {

// A model, its flat parameters, a runner and one micro-batch of data.
struct Harness {
  GptConfig cfg;
  int64_t B, T;
  std::unique_ptr<Device> dev = make_cpu_device();
  std::vector<std::unique_ptr<Unit>> units;
  std::vector<const Unit*> uv;
  FlatStore store;
  CpuKernels kernels;
  UnitRunner runner;
  std::unique_ptr<ActivationOffload> act_offload;  // outlives mb, which may hold its slots
  MicroBatchState mb;
  Buffer tok, tg, w;

  Harness(const GptConfig& c, int64_t b, DType pdt, DType adt, bool ckpt, size_t chunk = 4096,
          size_t cls_chunk = size_t{8} << 20)
      : cfg(c), B(b), T(c.seq_len), units(build_gpt(c)), uv(views(units)), store(*dev, uv, pdt, 7),
        kernels(cls_chunk), runner(uv, kernels, *dev, pdt, adt, ckpt), mb(*dev, static_cast<int>(uv.size()), chunk),
        tok(*dev, DType::i32, Shape{b, c.seq_len}, MemTag::activations),
        tg(*dev, DType::i32, Shape{b, c.seq_len}, MemTag::activations),
        w(*dev, math_dtype(adt), Shape{b, c.seq_len}, MemTag::activations) {
    fill_tokens(tok.tensor(), 1, c.vocab_size);
    fill_tokens(tg.tensor(), 2, c.vocab_size);
    const Tensor wt = w.tensor();
    for (int64_t i = 0; i < wt.numel(); ++i) {
      if (wt.dtype == DType::f64) wt.as<double>()[i] = 1.0 / static_cast<double>(wt.numel());
      else wt.as<float>()[i] = 1.0f / static_cast<float>(wt.numel());
    }
  }
  int head() const { return cfg.n_layer + 1; }
  // One forward + backward of the whole model; returns the mean loss.
  double step() {
    const Tensor loss = runner.forward(0, head() + 1, mb, store, tok.tensor(), tg.tensor());
    double s = 0;
    for (int64_t i = 0; i < loss.numel(); ++i) s += loss.as<float>()[i];
    runner.backward(0, head() + 1, mb, store, store, w.tensor());
    return s / static_cast<double>(loss.numel());
  }
  std::vector<float> all_grads() const {
    std::vector<float> g;
    for (int u = 0; u < static_cast<int>(uv.size()); ++u) {
      for (int p = 0; p < store.num_params(u); ++p) {
        const Tensor t = store.grad(u, p);
        g.insert(g.end(), t.as<float>(), t.as<float>() + t.numel());
      }
    }
    return g;
  }
};

const GptConfig kSmall{3, 4, 32, 16, 50};

TEST(UnitRunner, CheckpointingIsBitIdenticalAndKeepsLess) {
  Harness off(kSmall, 3, DType::f32, DType::f32, false);
  Harness on(kSmall, 3, DType::f32, DType::f32, true);
  const double loss_off = off.step(), loss_on = on.step();
  EXPECT_EQ(loss_off, loss_on);
  const std::vector<float> g_off = off.all_grads(), g_on = on.all_grads();
  ASSERT_EQ(g_off.size(), g_on.size());
  EXPECT_EQ(0, std::memcmp(g_off.data(), g_on.data(), g_off.size() * sizeof(float)));
  // The saved arena's capacity is its high-water mark (4 KiB chunks).
  const size_t cap_off = off.mb.saved.capacity(), cap_on = on.mb.saved.capacity();
  std::printf("saved arena high-water: %zu bytes without checkpointing, %zu with\n", cap_off, cap_on);
  EXPECT_LT(cap_on * 3, cap_off) << "checkpointing should keep roughly one (B,T,C) per block";
  EXPECT_LT(on.dev->stats().peak[static_cast<int>(MemTag::activations)],
            off.dev->stats().peak[static_cast<int>(MemTag::activations)]);
  // Recompute happens once per block and only with checkpointing.
  for (int u = 0; u <= on.head(); ++u) {
    const bool block = u >= 1 && u <= kSmall.n_layer;
    EXPECT_EQ(on.store.acquires[static_cast<int>(Phase::recompute)][static_cast<size_t>(u)], block ? 1 : 0);
    EXPECT_EQ(off.store.acquires[static_cast<int>(Phase::recompute)][static_cast<size_t>(u)], 0);
    for (int ph = 0; ph < 3; ++ph) {
      EXPECT_EQ(on.store.acquires[ph][static_cast<size_t>(u)], on.store.releases[ph][static_cast<size_t>(u)]);
    }
    EXPECT_EQ(on.store.dones[static_cast<size_t>(u)], 1);
  }
}

// [Note: activation offload]: the outputs one recomputed block passes to the
// next go to host memory and come back for the backward, bit for bit, and
// the pool holds 1 + 1 + kSlack of them for one micro-batch.
TEST(UnitRunner, OffloadedCheckpointsAreBitIdenticalAndLeaveTheDevice) {
  Harness a(kSmall, 3, DType::f32, DType::f32, true);
  Harness b(kSmall, 3, DType::f32, DType::f32, true);
  b.act_offload = std::make_unique<ActivationOffload>(*b.dev);
  b.runner.set_activation_offload(b.act_offload.get());
  for (int u = 0; u <= b.head(); ++u) EXPECT_EQ(b.runner.offloads_output(u), u == 1 || u == 2) << u;
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(a.step(), b.step()) << "step " << step;
    const std::vector<float> ga = a.all_grads(), gb = b.all_grads();
    ASSERT_EQ(ga.size(), gb.size());
    EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float))) << "step " << step;
    EXPECT_EQ(b.act_offload->slots(), 2 + ActivationOffload::kSlack) << "step " << step;
  }
  const size_t out_bytes = static_cast<size_t>(3 * kSmall.seq_len * kSmall.d_model) * sizeof(float);
  EXPECT_EQ(b.act_offload->slot_bytes_total(), (2 + ActivationOffload::kSlack) * out_bytes);
  // Two block outputs wait on the host; the saved arena keeps two fewer.
  const MemoryStats* host = b.dev->host_memory_stats(true);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->current[static_cast<int>(MemTag::activations)], 2 * out_bytes);
  EXPECT_LT(b.mb.saved.capacity(), a.mb.saved.capacity());
}

// A pipeline chunk's last output goes to the next stage, not to the host.
TEST(UnitRunner, ChunkEndsAreNotOffloaded) {
  Harness h(kSmall, 2, DType::f32, DType::f32, true);
  ActivationOffload off(*h.dev);
  std::vector<bool> chunk_last(static_cast<size_t>(h.head() + 1), false);
  chunk_last[1] = chunk_last[static_cast<size_t>(h.head())] = true;  // chunks [0, 2) and [2, 5)
  h.runner.set_activation_offload(&off, chunk_last);
  for (int u = 0; u <= h.head(); ++u) EXPECT_EQ(h.runner.offloads_output(u), u == 2) << u;
  h.runner.set_activation_offload(nullptr);
}

TEST(UnitRunner, SplitRangesMatchOneRange) {
  Harness one(kSmall, 2, DType::f32, DType::f32, true);
  Harness two(kSmall, 2, DType::f32, DType::f32, true);
  const double l1 = one.step();
  // As two pipeline chunks sharing one micro-batch state: [0, 2) and [2, head+1).
  const int H = two.head();
  const Tensor mid = two.runner.forward(0, 2, two.mb, two.store, two.tok.tensor(), two.tg.tensor());
  const Tensor loss = two.runner.forward(2, H + 1, two.mb, two.store, mid, two.tg.tensor());
  double s = 0;
  for (int64_t i = 0; i < loss.numel(); ++i) s += loss.as<float>()[i];
  EXPECT_EQ(l1, s / static_cast<double>(loss.numel()));
  Buffer dmid_buf(*two.dev, DType::f32, mid.shape, MemTag::comm);
  const Tensor dmid = two.runner.backward(2, H + 1, two.mb, two.store, two.store, two.w.tensor(), dmid_buf.tensor());
  ASSERT_TRUE(dmid.defined());
  EXPECT_EQ(dmid.shape, (Shape{2, kSmall.seq_len, kSmall.d_model}));
  EXPECT_FALSE(two.runner.backward(0, 2, two.mb, two.store, two.store, dmid).defined());
  const std::vector<float> a = one.all_grads(), b = two.all_grads();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  // LIFO use of `saved`: empty again after the micro-batch has gone back.
  const Arena::Mark m = two.mb.saved.mark();
  EXPECT_EQ(m.chunk, 0u);
  EXPECT_EQ(m.used, 0u);
}

// [Note: loss in the backward]: in a training walk the head's losses come
// from its backward. The losses, the gradients and the loss accumulator end
// with the bits of the usual order, and nothing is added before the backward.
TEST(UnitRunner, LossInTheBackwardIsTheSameBits) {
  for (bool ckpt : {false, true}) {
    Harness usual(kSmall, 3, DType::f32, DType::f32, ckpt);
    Harness late(kSmall, 3, DType::f32, DType::f32, ckpt);
    Buffer sum_usual(*usual.dev, DType::f64, Shape{1}, MemTag::workspace);
    Buffer sum_late(*late.dev, DType::f64, Shape{1}, MemTag::workspace);
    usual.kernels.zero(sum_usual.tensor());
    late.kernels.zero(sum_late.tensor());
    usual.mb.loss_sum = sum_usual.tensor();
    late.mb.loss_sum = sum_late.tensor();
    late.mb.loss_in_backward = true;
    const int H = usual.head();
    const Tensor lu = usual.runner.forward(0, H + 1, usual.mb, usual.store, usual.tok.tensor(), usual.tg.tensor());
    const std::vector<float> losses_usual(lu.as<float>(), lu.as<float>() + lu.numel());
    const double after_fwd_usual = *sum_usual.tensor().as<double>();
    const Tensor ll = late.runner.forward(0, H + 1, late.mb, late.store, late.tok.tensor(), late.tg.tensor());
    EXPECT_EQ(*sum_late.tensor().as<double>(), 0.0) << "the losses are added before the backward";
    EXPECT_NE(after_fwd_usual, 0.0);
    usual.runner.backward(0, H + 1, usual.mb, usual.store, usual.store, usual.w.tensor());
    late.runner.backward(0, H + 1, late.mb, late.store, late.store, late.w.tensor());
    // ll lives in the saved arena, released but not reused after the backward.
    EXPECT_EQ(0, std::memcmp(losses_usual.data(), ll.as<float>(), losses_usual.size() * sizeof(float)));
    EXPECT_EQ(*sum_usual.tensor().as<double>(), after_fwd_usual);
    EXPECT_EQ(*sum_late.tensor().as<double>(), after_fwd_usual);
    const std::vector<float> a = usual.all_grads(), b = late.all_grads();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "ckpt " << ckpt;
  }
}

TEST(UnitRunner, SteadyStateStepsAllocateNothing) {
  for (bool ckpt : {false, true}) {
    Harness h(kSmall, 2, DType::f32, DType::f32, ckpt, size_t{1} << 16);
    h.step();
    const MemoryStats first = h.dev->stats();
    for (int i = 0; i < 3; ++i) h.step();
    const MemoryStats later = h.dev->stats();
    EXPECT_EQ(first.current_total, later.current_total) << "ckpt " << ckpt;
    EXPECT_EQ(first.peak_total, later.peak_total) << "ckpt " << ckpt;
  }
}

// [Note: activation offload]: the pool's slots and the host buffers are made
// in the first step; later steps allocate nothing on the device or the host.
TEST(UnitRunner, OffloadedCheckpointsAllocateNothingAfterTheFirstStep) {
  Harness h(kSmall, 2, DType::f32, DType::f32, true, size_t{1} << 16);
  h.act_offload = std::make_unique<ActivationOffload>(*h.dev);
  h.runner.set_activation_offload(h.act_offload.get());
  h.step();
  const MemoryStats dev_first = h.dev->stats(), host_first = *h.dev->host_memory_stats(true);
  for (int i = 0; i < 3; ++i) h.step();
  const MemoryStats dev_later = h.dev->stats(), host_later = *h.dev->host_memory_stats(true);
  for (int t = 0; t < kNumMemTags; ++t) {
    EXPECT_EQ(dev_first.allocations[static_cast<size_t>(t)], dev_later.allocations[static_cast<size_t>(t)]) << t;
    EXPECT_EQ(host_first.allocations[static_cast<size_t>(t)], host_later.allocations[static_cast<size_t>(t)]) << t;
  }
  EXPECT_GT(host_later.allocations[static_cast<size_t>(MemTag::activations)], 0u);
}

TEST(UnitRunner, ClassifierNeverHoldsAllLogits) {
  // GPT-2's vocabulary, a narrow model: logits (B*T, V) in f32 would be 51 MB.
  const GptConfig cfg{1, 2, 16, 64, 50257};
  const int64_t B = 4;
  Harness h(cfg, B, DType::f32, DType::f32, false, size_t{256} << 10);
  const double loss = h.step();
  EXPECT_NEAR(loss, std::log(50257.0), 0.1);  // near-uniform predictions at init
  const MemoryStats& st = h.dev->stats();
  const size_t logits_bytes = static_cast<size_t>(B * cfg.seq_len) * cfg.vocab_size * 4;
  const size_t step_peak = st.peak[static_cast<int>(MemTag::workspace)] + st.peak[static_cast<int>(MemTag::activations)];
  std::printf("logits would be %zu bytes; workspace + activations peak %zu\n", logits_bytes, step_peak);
  EXPECT_LT(step_peak, logits_bytes / 2) << "workspace + activations peak " << step_peak;
  EXPECT_LE(st.peak[static_cast<int>(MemTag::workspace)], h.kernels.classifier_chunk_bytes() + (size_t{4} << 20));
}

// 16-bit storage (parameters, activations) against f32 on the same
// initial values: the loss and the gradient direction agree to rounding.
struct LowPrecision : ::testing::TestWithParam<std::pair<DType, DType>> {};

TEST_P(LowPrecision, LossAndGradientsTrackF32) {
  const auto [pdt, adt] = GetParam();
  const GptConfig cfg{2, 4, 64, 32, 256};
  Harness f32(cfg, 4, DType::f32, DType::f32, false);
  Harness low(cfg, 4, pdt, adt, true);
  const double l32 = f32.step(), l16 = low.step();
  // bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 0.2%); the loss
  // of an initialised model (~ln 256 = 5.5) moves by far less than 1%.
  std::printf("params %s activations %s: mean loss %.6f (f32 %.6f)\n", dtype_name(pdt), dtype_name(adt), l16, l32);
  EXPECT_NEAR(l16, l32, 0.01 * l32);
  const std::vector<float> g32 = f32.all_grads(), g16 = low.all_grads();
  double dot = 0, n32 = 0, n16 = 0;
  for (size_t i = 0; i < g32.size(); ++i) {
    dot += double(g32[i]) * g16[i];
    n32 += double(g32[i]) * g32[i];
    n16 += double(g16[i]) * g16[i];
  }
  std::printf("cosine(grad f32, grad low precision) %.6f\n", dot / std::sqrt(n32 * n16));
  EXPECT_GT(dot / std::sqrt(n32 * n16), 0.99) << "gradient direction";
}

INSTANTIATE_TEST_SUITE_P(Storage, LowPrecision,
                         ::testing::Values(std::make_pair(DType::bf16, DType::bf16),
                                           std::make_pair(DType::f32, DType::bf16),
                                           std::make_pair(DType::f16, DType::f16)),
                         [](const auto& info) {
                           return std::string("params_") + dtype_name(info.param.first) + "_acts_" +
                                  dtype_name(info.param.second);
                         });

TEST(UnitRunner, SgdStepsFitOneBatch) {
  // The gradients point downhill: plain SGD on one repeated batch drives its
  // loss well below the uniform-prediction level ln V.
  Harness h(GptConfig{2, 4, 32, 16, 64}, 4, DType::f32, DType::f32, true);
  const double first = h.step();
  double last = first;
  for (int it = 0; it < 60; ++it) {
    for (int u = 0; u <= h.head(); ++u) {
      for (int p = 0; p < h.store.num_params(u); ++p) {
        const Tensor w = h.store.param(u, p), g = h.store.grad(u, p);
        for (int64_t i = 0; i < w.numel(); ++i) w.as<float>()[i] -= 0.5f * g.as<float>()[i];
      }
    }
    h.store.zero_grads();
    last = h.step();
  }
  std::printf("SGD on one batch: loss %.4f -> %.4f\n", first, last);
  EXPECT_NEAR(first, std::log(64.0), 0.1);
  EXPECT_LT(last, 0.6 * first);
}

TEST(GptModel, InitIsShardableAndGpt2Scaled) {
  const GptConfig cfg{4, 4, 64, 32, 256};
  const auto units = build_gpt(cfg);
  // Any split of a parameter initialises identically.
  const Unit& block = *units[2];
  const int64_t n = 3 * 64 * 64;
  std::vector<float> whole(n), parts(n);
  block.init_param(2, 0, n, whole.data(), 42, 2);
  block.init_param(2, 0, 1000, parts.data(), 42, 2);
  block.init_param(2, 1000, n - 1000, parts.data() + 1000, 42, 2);
  EXPECT_EQ(0, std::memcmp(whole.data(), parts.data(), n * sizeof(float)));
  auto stddev = [](const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    const double m = s / v.size();
    return std::sqrt(s2 / v.size() - m * m);
  };
  EXPECT_NEAR(stddev(whole), 0.02, 0.002);
  std::vector<float> proj(64 * 256);
  block.init_param(10, 0, 64 * 256, proj.data(), 42, 2);  // mlp.c_proj.weight
  EXPECT_NEAR(stddev(proj), 0.02 / std::sqrt(8.0), 0.0005);
  std::vector<float> ln(64);
  block.init_param(0, 0, 64, ln.data(), 42, 2);
  for (float x : ln) EXPECT_EQ(x, 1.0f);
  // Different units draw different streams.
  std::vector<float> other(n);
  units[3]->init_param(2, 0, n, other.data(), 42, 3);
  EXPECT_NE(0, std::memcmp(whole.data(), other.data(), n * sizeof(float)));
  // Decay on 2-D weights only.
  for (const auto& u : units)
    for (const ParamSpec& p : u->params()) EXPECT_EQ(p.weight_decay, p.shape.rank() == 2) << u->name() << "." << p.name;
}

TEST(GptModel, Gpt2SmallParameterCountAndFlops) {
  const GptConfig cfg{12, 12, 768, 1024, 50257};
  const Model m = build_model(describe_gpt2(gpt2_shape(cfg)));
  EXPECT_EQ(m.num_units(), 14);
  EXPECT_EQ(m.num_params(), 124439808);  // GPT-2 small with tied wte
  EXPECT_EQ(m.unit(13).tied().size(), 1u);
  EXPECT_TRUE(m.unit(1).checkpointable());
  EXPECT_FALSE(m.unit(0).checkpointable());
  const double expect = 6.0 * (124439808.0 - 1024 * 768) + 12.0 * 12 * 768 * 1024;
  EXPECT_DOUBLE_EQ(m.flops_per_token(), expect);
  EXPECT_DOUBLE_EQ(gpt_flops_per_token(cfg), expect);
}

}  // namespace
}  // namespace zt::test
