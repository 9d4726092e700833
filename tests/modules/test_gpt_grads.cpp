// Finite-difference gradient checks (f64 storage) of each GPT-2 unit and of
// the whole tiny model through UnitRunner, including the tied wte.
#include "module_test_support.hpp"

namespace zt::test {
namespace {

// n_layer 2, n_head 2, C 8, T 5, V 11, B 2.
const GptConfig kTiny{2, 2, 8, 5, 11};
constexpr int64_t kB = 2;

struct GradCheck : ::testing::TestWithParam<bool> {  // param: activation checkpointing
  std::unique_ptr<Device> dev = make_cpu_device();
  std::vector<std::unique_ptr<Unit>> units = build_gpt(kTiny);
  std::vector<const Unit*> uv = views(units);
  FlatStore store{*dev, uv, DType::f64, 1234};
  CpuKernels kernels{5 * 11 * sizeof(double)};  // 5 rows per classifier chunk: 2 chunks
  UnitRunner runner{uv, kernels, *dev, DType::f64, DType::f64, GetParam()};
  MicroBatchState mb{*dev, static_cast<int>(uv.size()), 1 << 14};
  TensorPool pool;
  RunnerFd fd{uv, store, runner, mb, pool};
  const int L = kTiny.n_layer, T = kTiny.seq_len, C = kTiny.d_model;

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
};

TEST_P(GradCheck, EmbeddingUnit) {
  const Tensor tok = make(Shape{kB, T}, DType::i32);
  fill_tokens(tok, 1, kTiny.vocab_size);
  const Tensor R = make(Shape{kB, T, C});
  fill_uniform(R, 2);
  EXPECT_FALSE(analytic(0, 1, tok, Tensor(), R).defined());
  check_unit_params(0, [&] { return objective(0, 1, tok, Tensor(), R); }, 1000, 3);
}

TEST_P(GradCheck, BlockUnit) {
  const Tensor x = make(Shape{kB, T, C});
  fill_uniform(x, 10, 2.0);
  const Tensor R = make(Shape{kB, T, C});
  fill_uniform(R, 11);
  // Larger weights than GPT-2's init so that every path carries signal.
  for (int p = 0; p < store.num_params(1); ++p) fill_uniform(store.param(1, p), 100 + static_cast<uint64_t>(p), 0.5);
  const Tensor dx = analytic(1, 2, x, Tensor(), R);
  auto f = [&] { return objective(1, 2, x, Tensor(), R); };
  check_unit_params(1, f, 40, 12);
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(x.numel()), "block din");
  if (GetParam()) {
    EXPECT_EQ(store.acquires[static_cast<int>(Phase::recompute)][1], 1);
  }
}

TEST_P(GradCheck, HeadUnitWithTiedWte) {
  const int head = L + 1;
  const Tensor x = make(Shape{kB, T, C});
  fill_uniform(x, 20, 2.0);
  const Tensor tg = make(Shape{kB, T}, DType::i32);
  fill_tokens(tg, 21, kTiny.vocab_size);
  tg.as<int32_t>()[3] = -1;  // an ignored position
  fill_uniform(store.param(0, 0), 22, 0.5);  // wte
  fill_uniform(store.param(head, 0), 23, 1.0);
  fill_uniform(store.param(head, 1), 24, 1.0);
  const Tensor w = make(Shape{kB, T});
  fill_uniform(w, 25);
  const Tensor dx = analytic(head, head + 1, x, tg, w);
  auto f = [&] { return objective(head, head + 1, x, tg, w); };
  check_unit_params(head, f, 1000, 26);
  check_fd(f, store.param(0, 0).as<double>(), store.grad(0, 0).as<double>(), all_indices(store.param(0, 0).numel()),
           "tied wte");
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(x.numel()), "head din");
}

TEST_P(GradCheck, WholeModel) {
  const Tensor tok = make(Shape{kB, T}, DType::i32), tg = make(Shape{kB, T}, DType::i32);
  fill_tokens(tok, 30, kTiny.vocab_size);
  fill_tokens(tg, 31, kTiny.vocab_size);
  // Perturb every parameter away from its init (LN weights 1, biases 0) so
  // that no gradient path is trivially zero.
  for (int u = 0; u < static_cast<int>(uv.size()); ++u) {
    for (int p = 0; p < store.num_params(u); ++p) {
      const Tensor t = store.param(u, p);
      Tensor noise = make(t.shape);
      fill_uniform(noise, 40 + 16 * static_cast<uint64_t>(u) + static_cast<uint64_t>(p), 0.3);
      for (int64_t i = 0; i < t.numel(); ++i) t.as<double>()[i] += noise.as<double>()[i];
    }
  }
  const Tensor w = make(Shape{kB, T});
  for (int64_t i = 0; i < w.numel(); ++i) w.as<double>()[i] = 1.0 / static_cast<double>(w.numel());
  analytic(0, L + 2, tok, tg, w);
  auto f = [&] { return objective(0, L + 2, tok, tg, w); };
  for (int u = 0; u < static_cast<int>(uv.size()); ++u) check_unit_params(u, f, 12, 50 + 16 * static_cast<uint64_t>(u));
  // wte collects the head's classifier gradient and the embedding's lookup gradient.
  check_fd(f, store.param(0, 0).as<double>(), store.grad(0, 0).as<double>(), some_indices(store.param(0, 0).numel(), 30, 99),
           "wte (tied)");
  for (size_t u = 0; u < uv.size(); ++u) {
    EXPECT_EQ(store.dones[u], 1);
    for (int ph = 0; ph < 3; ++ph) EXPECT_EQ(store.acquires[ph][u], store.releases[ph][u]);
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpointing, GradCheck, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "on" : "off"; });

}  // namespace
}  // namespace zt::test
