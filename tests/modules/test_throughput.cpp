// Forward + backward throughput of the tiny model (L 2, C 64, T 64, V 256,
// B 8) in f32 on the ambient thread settings. Prints tokens/s; asserts only
// that training steps run (timing on a shared CI machine is not a pass/fail
// signal). Run with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one core.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "module_test_support.hpp"

namespace zt::test {
namespace {

void measure(const GptConfig& cfg, int64_t B, bool ckpt, double seconds) {
  auto dev = make_cpu_device();
  const auto units = build_gpt(cfg);
  const auto uv = views(units);
  FlatStore store(*dev, uv, DType::f32, 1);
  CpuKernels kernels;
  UnitRunner runner(uv, kernels, *dev, DType::f32, DType::f32, ckpt);
  MicroBatchState mb(*dev, static_cast<int>(uv.size()));
  Buffer tok(*dev, DType::i32, Shape{B, cfg.seq_len}, MemTag::activations);
  Buffer tg(*dev, DType::i32, Shape{B, cfg.seq_len}, MemTag::activations);
  Buffer w(*dev, DType::f32, Shape{B, cfg.seq_len}, MemTag::activations);
  fill_tokens(tok.tensor(), 1, cfg.vocab_size);
  fill_tokens(tg.tensor(), 2, cfg.vocab_size);
  for (int64_t i = 0; i < B * cfg.seq_len; ++i) w.as<float>()[i] = 1.0f / static_cast<float>(B * cfg.seq_len);
  const int last = cfg.n_layer + 2;
  auto step = [&] {
    const Tensor loss = runner.forward(0, last, mb, store, tok.tensor(), tg.tensor());
    const float l0 = loss.as<float>()[0];
    runner.backward(0, last, mb, store, store, w.tensor());
    return l0;
  };
  ASSERT_TRUE(std::isfinite(step()));  // the first step grows the arenas
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  int steps = 0;
  double elapsed = 0;
  do {
    step();
    ++steps;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < seconds);
  const double tps = static_cast<double>(steps * B * cfg.seq_len) / elapsed;
  std::printf("L%d C%d T%d V%d B%ld ckpt %d: %d steps, %.1f ms/step, %.0f tokens/s, %.2f GFLOP/s\n", cfg.n_layer,
              cfg.d_model, cfg.seq_len, cfg.vocab_size, static_cast<long>(B), ckpt ? 1 : 0, steps,
              1e3 * elapsed / steps, tps, tps * gpt_flops_per_token(cfg) * 1e-9);
}

TEST(Throughput, TinyModelForwardBackward) {
  const GptConfig tiny{2, 4, 64, 64, 256};
  measure(tiny, 8, false, 1.0);
  measure(tiny, 8, true, 1.0);
}

// GPT-2 124M runs (one forward + backward at T 256), skipped unless
// ZT_BENCH_GPT2=1: it takes seconds and ~2 GB.
TEST(Throughput, Gpt2SmallRuns) {
  if (std::getenv("ZT_BENCH_GPT2") == nullptr) GTEST_SKIP() << "set ZT_BENCH_GPT2=1 to run";
  GptConfig cfg{12, 12, 768, 1024, 50257};
  cfg.seq_len = 256;  // wpe rows; the model is otherwise GPT-2 small
  measure(cfg, 1, true, 0.0);
}

}  // namespace
}  // namespace zt::test
