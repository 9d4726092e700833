// The property packed fine-tuning rests on ([Note: document masking] in
// modules/kernels.hpp): a row holding several documents, run with its
// doc_start, gives each document the per-token losses it gets alone in a row
// of its own, and the parameter gradients of the packed row are the sums of
// the documents' gradients alone. Whole tiny GPT-2 and Llama models through
// UnitRunner in f64, with and without activation checkpointing (the
// recomputation must see the documents too), documents of 4, 1 and 3 tokens.
#include <tuple>

#include "module_test_support.hpp"
#include "modules/llama_desc.hpp"
#include "modules/model.hpp"

namespace zt::test {
namespace {

ModelShape tiny(const std::string& arch) {
  if (arch == "gpt2") return gpt2_shape(GptConfig{2, 2, 8, 8, 11}, "gpt2 packing");
  ModelShape s = llama_shape("llama packing", 2, 16, 4, 2, 12, 11, 8);
  s.rope.theta = 10.0;
  return s;
}

ModelDesc describe(const ModelShape& s) { return s.arch == "llama" ? describe_llama(s) : describe_gpt2(s); }

// Params: (arch, activation checkpointing).
struct PackedDocuments : ::testing::TestWithParam<std::tuple<std::string, bool>> {
  std::unique_ptr<Device> dev = make_cpu_device();
  Model model = build_model(describe(tiny(std::get<0>(GetParam()))));
  std::vector<const Unit*> uv = model.units();
  FlatStore store{*dev, uv, DType::f64, 77};
  CpuKernels kernels;
  UnitRunner runner{uv, kernels, *dev, DType::f64, DType::f64, std::get<1>(GetParam())};
  TensorPool pool;
  const int64_t T = 8;
  const std::vector<int64_t> lens = {4, 1, 3};

  // Per-token losses (copied out) and, in `grads`, every parameter gradient
  // of one row: forward, then backward with each token's loss weighed by R.
  std::vector<double> run(const Tensor& tokens, const Tensor& targets, const Tensor& doc_start, const Tensor& R,
                          std::vector<std::vector<double>>& grads) {
    MicroBatchState mb(*dev, static_cast<int>(uv.size()), 1 << 14);
    store.zero_grads();
    const int n = static_cast<int>(uv.size());
    const Tensor losses = runner.forward(0, n, mb, store, tokens, targets, doc_start);
    std::vector<double> out(losses.as<double>(), losses.as<double>() + losses.numel());
    runner.backward(0, n, mb, store, store, R);
    grads.clear();
    for (int u = 0; u < n; ++u)
      for (int p = 0; p < store.num_params(u); ++p) {
        const Tensor g = store.grad(u, p);
        grads.emplace_back(g.as<double>(), g.as<double>() + g.numel());
      }
    return out;
  }
  // Elements [s, s + L) of each (1, T) row tensor as a (1, L) tensor.
  Tensor slice(const Tensor& x, int64_t s, int64_t L) {
    const Tensor y = pool.make(Shape{1, L}, x.dtype);
    std::memcpy(y.data, static_cast<const char*>(x.data) + s * dtype_size(x.dtype), y.bytes());
    return y;
  }
};

TEST_P(PackedDocuments, PackedRowEqualsDocumentsAlone) {
  const Tensor tokens = pool.make(Shape{1, T}, DType::i32), targets = pool.make(Shape{1, T}, DType::i32);
  fill_tokens(tokens, 1, 11);
  fill_tokens(targets, 2, 11);
  targets.as<int32_t>()[3] = -1;  // an ignored target, as a boundary has
  const Tensor R = pool.rand(Shape{1, T}, 3);
  std::vector<std::vector<double>> packed_grads, alone_grads, sum_grads;
  const std::vector<double> packed = run(tokens, targets, pool.doc_start({lens}, T), R, packed_grads);
  std::vector<double> alone;
  int64_t s = 0;
  for (int64_t L : lens) {
    const std::vector<double> l = run(slice(tokens, s, L), slice(targets, s, L), Tensor(), slice(R, s, L), alone_grads);
    alone.insert(alone.end(), l.begin(), l.end());
    if (sum_grads.empty()) {
      sum_grads = alone_grads;
    } else {
      for (size_t p = 0; p < sum_grads.size(); ++p)
        for (size_t i = 0; i < sum_grads[p].size(); ++i) sum_grads[p][i] += alone_grads[p][i];
    }
    s += L;
  }
  ASSERT_EQ(packed.size(), alone.size());
  for (size_t t = 0; t < packed.size(); ++t) EXPECT_NEAR(packed[t], alone[t], 1e-12) << "token " << t;
  EXPECT_EQ(packed[3], 0.0);
  ASSERT_EQ(packed_grads.size(), sum_grads.size());
  for (size_t p = 0; p < packed_grads.size(); ++p)
    for (size_t i = 0; i < packed_grads[p].size(); ++i)
      EXPECT_NEAR(packed_grads[p][i], sum_grads[p][i], 1e-12 * std::max(1.0, std::fabs(sum_grads[p][i])))
          << "parameter " << p << " element " << i;

  // Without the documents the row is one sequence: the later documents see
  // the earlier ones, and the losses differ.
  std::vector<std::vector<double>> unused;
  const std::vector<double> plain = run(tokens, targets, Tensor(), R, unused);
  double differs = 0;
  for (size_t t = 4; t < plain.size(); ++t) differs = std::max(differs, std::fabs(plain[t] - packed[t]));
  EXPECT_GT(differs, 1e-6);
  for (size_t t = 0; t < 4; ++t) EXPECT_EQ(plain[t], packed[t]) << "the first document sees nothing else";
}

INSTANTIATE_TEST_SUITE_P(Models, PackedDocuments,
                         ::testing::Combine(::testing::Values(std::string("gpt2"), std::string("llama")),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_checkpointed" : "");
                         });

}  // namespace
}  // namespace zt::test
