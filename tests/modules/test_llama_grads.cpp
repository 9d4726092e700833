// Finite-difference gradient checks (f64 storage) of the Llama units and of a
// whole tiny Llama through UnitRunner: grouped-query attention (4 query heads
// on 2 key/value heads), Llama 3 rope scaling with every frequency regime
// present, untied and tied LM head, with and without activation
// checkpointing.
#include <tuple>

#include "module_test_support.hpp"
#include "modules/llama_desc.hpp"
#include "modules/model.hpp"

namespace zt::test {
namespace {

constexpr int64_t kB = 2;

// n_layer 2, C 32, 4 heads of 8 on 2 kv heads, F 24, V 11, T 5. theta 100
// gives wavelengths 6.3, 19.9, 62.8 and 199 positions; with original 100,
// low 1 and high 4 (bands 25 and 100) the first two are kept, the third
// blended and the fourth divided by the factor.
ModelShape tiny_llama(bool tied) {
  ModelShape s = llama_shape("llama grad-check", 2, 32, 4, 2, 24, 11, 5);
  s.rope.theta = 100.0;
  s.rope.llama3 = true;
  s.rope.factor = 3.0;
  s.rope.low_freq_factor = 1.0;
  s.rope.high_freq_factor = 4.0;
  s.rope.original_max_position_embeddings = 100;
  s.tie_word_embeddings = tied;
  return s;
}

// Params: (tied LM head, activation checkpointing).
struct LlamaGradCheck : ::testing::TestWithParam<std::tuple<bool, bool>> {
  bool tied = std::get<0>(GetParam());
  std::unique_ptr<Device> dev = make_cpu_device();
  Model model = build_model(describe_llama(tiny_llama(tied)));
  std::vector<const Unit*> uv = model.units();
  FlatStore store{*dev, uv, DType::f64, 1234};
  CpuKernels kernels{5 * 11 * sizeof(double)};  // 5 rows per classifier chunk: 2 chunks
  UnitRunner runner{uv, kernels, *dev, DType::f64, DType::f64, std::get<1>(GetParam())};
  MicroBatchState mb{*dev, static_cast<int>(uv.size()), 1 << 14};
  TensorPool pool;
  RunnerFd fd{uv, store, runner, mb, pool};
  const int L = 2, T = 5, C = 32, V = 11;

  Tensor make(Shape s, DType t = DType::f64) { return pool.make(s, t); }
  double objective(int first, int last, const Tensor& in, const Tensor& targets, const Tensor& R) {
    return fd.objective(first, last, in, targets, R);
  }
  Tensor analytic(int first, int last, const Tensor& in, const Tensor& targets, const Tensor& R) {
    return fd.analytic(first, last, in, targets, R);
  }
  void check_unit_params(int unit, const std::function<double()>& f, int64_t per_param, uint64_t key) {
    fd.check_unit_params(unit, f, per_param, key);
  }
  void perturb_all() {  // away from init (RMSNorm weights 1) so that no path is trivial
    for (int u = 0; u < static_cast<int>(uv.size()); ++u)
      for (int p = 0; p < store.num_params(u); ++p) {
        const Tensor t = store.param(u, p);
        Tensor noise = make(t.shape);
        fill_uniform(noise, 40 + 16 * static_cast<uint64_t>(u) + static_cast<uint64_t>(p), 0.3);
        for (int64_t i = 0; i < t.numel(); ++i) t.as<double>()[i] += noise.as<double>()[i];
      }
  }
};

TEST_P(LlamaGradCheck, Description) {
  const ModelDesc& d = model.desc();
  ASSERT_EQ(d.num_units(), L + 2);
  EXPECT_EQ(d.units[0].tensors.size(), 1u) << "no position table";
  EXPECT_EQ(d.units[1].tensors[2].shape, (Shape{16, 32})) << "k_proj: 2 kv heads of 8";
  if (tied) {
    EXPECT_EQ(d.units.back().tensors.size(), 1u);
    ASSERT_EQ(d.units.back().tied.size(), 1u);
    EXPECT_EQ(d.units.back().tied[0].unit, 0);
  } else {
    EXPECT_EQ(d.units.back().tensors.size(), 2u);
    EXPECT_TRUE(d.units.back().tied.empty());
  }
}

TEST_P(LlamaGradCheck, BlockUnit) {
  const Tensor x = make(Shape{kB, T, C});
  fill_uniform(x, 10, 2.0);
  const Tensor R = make(Shape{kB, T, C});
  fill_uniform(R, 11);
  for (int p = 0; p < store.num_params(1); ++p) fill_uniform(store.param(1, p), 100 + static_cast<uint64_t>(p), 0.5);
  const Tensor dx = analytic(1, 2, x, Tensor(), R);
  auto f = [&] { return objective(1, 2, x, Tensor(), R); };
  check_unit_params(1, f, 40, 12);
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(x.numel()), "block din");
  if (std::get<1>(GetParam())) {
    EXPECT_EQ(store.acquires[static_cast<int>(Phase::recompute)][1], 1);
  }
}

TEST_P(LlamaGradCheck, HeadUnit) {
  const int head = L + 1;
  const Tensor x = make(Shape{kB, T, C});
  fill_uniform(x, 20, 2.0);
  const Tensor tg = make(Shape{kB, T}, DType::i32);
  fill_tokens(tg, 21, V);
  tg.as<int32_t>()[3] = -1;  // an ignored position
  fill_uniform(store.param(0, 0), 22, 0.5);
  for (int p = 0; p < store.num_params(head); ++p) fill_uniform(store.param(head, p), 23 + static_cast<uint64_t>(p));
  const Tensor w = make(Shape{kB, T});
  fill_uniform(w, 25);
  const Tensor dx = analytic(head, head + 1, x, tg, w);
  auto f = [&] { return objective(head, head + 1, x, tg, w); };
  check_unit_params(head, f, 1000, 26);
  if (tied)
    check_fd(f, store.param(0, 0).as<double>(), store.grad(0, 0).as<double>(), all_indices(store.param(0, 0).numel()),
             "tied embed_tokens");
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(x.numel()), "head din");
}

TEST_P(LlamaGradCheck, WholeModel) {
  const Tensor tok = make(Shape{kB, T}, DType::i32), tg = make(Shape{kB, T}, DType::i32);
  fill_tokens(tok, 30, V);
  fill_tokens(tg, 31, V);
  perturb_all();
  const Tensor w = make(Shape{kB, T});
  for (int64_t i = 0; i < w.numel(); ++i) w.as<double>()[i] = 1.0 / static_cast<double>(w.numel());
  analytic(0, L + 2, tok, tg, w);
  auto f = [&] { return objective(0, L + 2, tok, tg, w); };
  for (int u = 0; u < static_cast<int>(uv.size()); ++u) check_unit_params(u, f, 12, 50 + 16 * static_cast<uint64_t>(u));
  check_fd(f, store.param(0, 0).as<double>(), store.grad(0, 0).as<double>(),
           some_indices(store.param(0, 0).numel(), 30, 99), "embed_tokens");
  for (size_t u = 0; u < uv.size(); ++u) {
    EXPECT_EQ(store.dones[u], 1);
    for (int ph = 0; ph < 3; ++ph) EXPECT_EQ(store.acquires[ph][u], store.releases[ph][u]);
  }
}

// The rotation is what makes the model see order: the same tokens in another
// order give another loss at the last position (without RoPE, causal
// attention over a permuted prefix would give the same last output).
TEST_P(LlamaGradCheck, PositionsMatter) {
  perturb_all();
  const Tensor tok = make(Shape{1, T}, DType::i32), tg = make(Shape{1, T}, DType::i32);
  const int32_t a[] = {1, 2, 3, 4, 5}, b[] = {2, 1, 4, 3, 5};
  for (int t = 0; t < T; ++t) tg.as<int32_t>()[t] = t == T - 1 ? 7 : -1;
  UnitRunner r1{uv, kernels, *dev, DType::f64, DType::f64, false};
  auto last_loss = [&](const int32_t* ids) {
    std::memcpy(tok.data, ids, sizeof(int32_t) * T);
    mb.reset();
    const Tensor out = r1.forward(0, L + 2, mb, store, tok, tg);
    return out.as<double>()[T - 1];
  };
  EXPECT_GT(std::fabs(last_loss(a) - last_loss(b)), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(TiedCheckpointing, LlamaGradCheck, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "tied" : "untied") + "_ckpt" +
                                  (std::get<1>(info.param) ? "On" : "Off");
                         });

}  // namespace
}  // namespace zt::test
