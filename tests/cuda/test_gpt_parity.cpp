// Whole-model parity: the GPT-2 units run through UnitRunner with
// CudaKernels + CudaDevice and with CpuKernels + CpuDevice from the same
// parameters and batch; the per-token losses and every parameter gradient
// must agree. Also: checkpointing on the GPU is bit-identical (every kernel
// is deterministic), and steady-state GPU steps allocate nothing.
#include "cuda_test_support.hpp"
#include "modules/cuda/kernel_profile.hpp"
#include "modules/llama_desc.hpp"
#include "modules/model.hpp"

namespace zt::test {
namespace {

// Parameters on the GPU copied from a host FlatStore, gradients zeroed: the
// same seam as FlatStore, in device memory.
class DeviceStore final : public ParamProvider, public GradSink {
 public:
  DeviceStore(CudaDevice& dev, const std::vector<const Unit*>& units, const FlatStore& src, DType pdt)
      : units_(units) {
    params_.resize(units.size());
    grads_.resize(units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      const auto specs = units[u]->params();
      for (size_t p = 0; p < specs.size(); ++p) {
        params_[u].emplace_back(dev, pdt, specs[p].shape, MemTag::params);
        const Tensor h = src.param(static_cast<int>(u), static_cast<int>(p));
        dev.copy_from_host(params_[u].back().data(), h.data, h.bytes());
        grads_[u].emplace_back(dev, math_dtype(pdt), specs[p].shape, MemTag::grads);
        dev.memset_zero(grads_[u].back().data(), grads_[u].back().bytes());
      }
    }
  }
  std::vector<Tensor> acquire(int unit, Phase) override { return views(params_, unit); }
  void release(int, Phase) override {}
  std::vector<Tensor> grads(int unit) override { return views(grads_, unit); }
  void done(int) override {}
  Tensor grad(int unit, int p) const { return grads_[static_cast<size_t>(unit)][static_cast<size_t>(p)].tensor(); }

 private:
  // Own buffers of `unit`, then its tied parameters' (the owner's buffers).
  std::vector<Tensor> views(const std::vector<std::vector<Buffer>>& bufs, int unit) const {
    std::vector<Tensor> v;
    for (const Buffer& b : bufs[static_cast<size_t>(unit)]) v.push_back(b.tensor());
    for (const TiedParam& t : units_[static_cast<size_t>(unit)]->tied()) {
      v.push_back(bufs[static_cast<size_t>(t.unit)][static_cast<size_t>(t.param)].tensor());
    }
    return v;
  }
  std::vector<const Unit*> units_;
  std::vector<std::vector<Buffer>> params_, grads_;
};

struct ModelCase {
  const char* name;
  GptConfig cfg;
  int64_t B;
  DType pdt, adt;
  bool ckpt;
  double loss_tol, grad_tol;
};

// [Note: parity tolerances] per token loss and per parameter gradient. In
// f32 every operation agrees to ~1e-6; through a few layers and the
// backward's chain of products this stays below 1e-4. With 16-bit
// activations both sides round the same stored activations, and the GPU also
// rounds fp32 gradients to 16 bits where they meet a 16-bit matrix
// ([Note: matmul precision]); each such rounding is 2^-9 relative, a few of
// them in a row stay within 5%.
const ModelCase kCases[] = {
    {"f32", {2, 4, 64, 32, 256}, 4, DType::f32, DType::f32, false, 1e-5, 1e-4},
    {"f32_odd_shapes_ckpt", {1, 3, 36, 17, 97}, 3, DType::f32, DType::f32, true, 1e-5, 1e-4},
    {"bf16", {2, 4, 64, 32, 256}, 4, DType::bf16, DType::bf16, true, 1e-2, 5e-2},
    {"f32_params_bf16_acts", {2, 4, 64, 32, 256}, 4, DType::f32, DType::bf16, false, 1e-2, 5e-2},
    {"bf16_odd_shapes", {1, 3, 36, 17, 97}, 3, DType::bf16, DType::bf16, false, 1e-2, 5e-2},
};

struct GptGpu : GpuFixture {
  // One forward + backward of the whole model; returns per-token losses.
  std::vector<double> step(UnitRunner& runner, MicroBatchState& mb, ParamProvider& params, GradSink& grads,
                           const Tensor& tok, const Tensor& tg, const Tensor& w, int head) {
    const Tensor loss = runner.forward(0, head + 1, mb, params, tok, tg);
    std::vector<double> l = values(loss);
    runner.backward(0, head + 1, mb, params, grads, w);
    return l;
  }
  // The head's dout: each token's loss weighs 1 / (B T), as in the trainer.
  Tensor loss_weights(int64_t B, int64_t T) {
    const Tensor w = host_tensor(DType::f32, Shape{B, T});
    for (int64_t i = 0; i < B * T; ++i) w.as<float>()[i] = 1.0f / static_cast<float>(B * T);
    return w;
  }
};

struct GptParity : GptGpu, ::testing::WithParamInterface<ModelCase> {};

TEST_P(GptParity, LossAndGradientsMatchCpu) {
  const ModelCase& c = GetParam();
  const auto units = build_gpt(c.cfg);
  const std::vector<const Unit*> uv = views(units);
  const int head = c.cfg.n_layer + 1;
  const Tensor tok = host_tensor(DType::i32, Shape{c.B, c.cfg.seq_len});
  const Tensor tg = host_tensor(DType::i32, Shape{c.B, c.cfg.seq_len});
  fill_tokens(tok, rng_key(seed, 1), c.cfg.vocab_size);
  fill_tokens(tg, rng_key(seed, 2), c.cfg.vocab_size);
  tg.as<int32_t>()[3] = -1;  // an ignored target
  const Tensor w = loss_weights(c.B, c.cfg.seq_len);

  FlatStore cpu_store(*host, uv, c.pdt, seed);
  UnitRunner cpu_runner(uv, *cpu_k, *host, c.pdt, c.adt, false);
  MicroBatchState cpu_mb(*host, static_cast<int>(uv.size()));
  const std::vector<double> cpu_loss = step(cpu_runner, cpu_mb, cpu_store, cpu_store, tok, tg, w, head);

  DeviceStore gpu_store(*gpu, uv, cpu_store, c.pdt);
  UnitRunner gpu_runner(uv, *gpu_k, *gpu, c.pdt, c.adt, c.ckpt);
  MicroBatchState gpu_mb(*gpu, static_cast<int>(uv.size()));
  const Tensor tok_d = to_gpu(tok), tg_d = to_gpu(tg), w_d = to_gpu(w);
  const std::vector<double> gpu_loss = step(gpu_runner, gpu_mb, gpu_store, gpu_store, tok_d, tg_d, w_d, head);

  EXPECT_LT(rel_error(gpu_loss, cpu_loss), c.loss_tol) << "per-token losses";
  double mean_cpu = 0, mean_gpu = 0;
  for (size_t i = 0; i < cpu_loss.size(); ++i) {
    mean_cpu += cpu_loss[i];
    mean_gpu += gpu_loss[i];
  }
  std::printf("%s: mean loss cpu %.7f gpu %.7f\n", c.name, mean_cpu / cpu_loss.size(), mean_gpu / gpu_loss.size());
  double worst = 0;
  for (int u = 0; u < static_cast<int>(uv.size()); ++u) {
    const auto specs = uv[static_cast<size_t>(u)]->params();
    for (int p = 0; p < cpu_store.num_params(u); ++p) {
      const double err = rel_error(values(gpu_store.grad(u, p)), values(cpu_store.grad(u, p)));
      worst = std::max(worst, err);
      EXPECT_LT(err, c.grad_tol) << uv[static_cast<size_t>(u)]->name() << "." << specs[static_cast<size_t>(p)].name;
    }
  }
  std::printf("%s: worst gradient relative error %.3g (bound %.0e)\n", c.name, worst, c.grad_tol);
}

INSTANTIATE_TEST_SUITE_P(Models, GptParity, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Checkpointing re-runs each block's forward before its backward; with
// deterministic kernels the gradients are the same bits, and from the second
// step on nothing is allocated.
TEST_F(GptGpu, CheckpointingIsBitIdenticalAndSteadyStateAllocatesNothing) {
  const GptConfig cfg{2, 4, 64, 32, 256};
  const int64_t B = 4;
  const auto units = build_gpt(cfg);
  const std::vector<const Unit*> uv = views(units);
  const int head = cfg.n_layer + 1;
  const Tensor tok = host_tensor(DType::i32, Shape{B, cfg.seq_len}), tg = host_tensor(DType::i32, Shape{B, cfg.seq_len});
  fill_tokens(tok, rng_key(seed, 1), cfg.vocab_size);
  fill_tokens(tg, rng_key(seed, 2), cfg.vocab_size);
  const Tensor w = loss_weights(B, cfg.seq_len);
  FlatStore init(*host, uv, DType::bf16, seed);
  const Tensor tok_d = to_gpu(tok), tg_d = to_gpu(tg), w_d = to_gpu(w);

  std::vector<std::vector<double>> grads[2];
  for (int ckpt = 0; ckpt < 2; ++ckpt) {
    DeviceStore store(*gpu, uv, init, DType::bf16);
    UnitRunner runner(uv, *gpu_k, *gpu, DType::bf16, DType::bf16, ckpt == 1);
    MicroBatchState mb(*gpu, static_cast<int>(uv.size()));
    const std::vector<double> first = step(runner, mb, store, store, tok_d, tg_d, w_d, head);
    for (int u = 0; u <= head; ++u) {
      for (int p = 0; p < init.num_params(u); ++p) grads[ckpt].push_back(values(store.grad(u, p)));
    }
    gpu->synchronize();
    const MemoryStats before = gpu->stats();
    for (int it = 0; it < 2; ++it) {
      const std::vector<double> again = step(runner, mb, store, store, tok_d, tg_d, w_d, head);
      EXPECT_EQ(max_abs_diff(again, first), 0.0) << "the same batch must give the same losses";
    }
    EXPECT_EQ(gpu->stats().peak_total, before.peak_total) << "ckpt " << ckpt;
    EXPECT_EQ(gpu->stats().current_total, before.current_total) << "ckpt " << ckpt;
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_EQ(max_abs_diff(grads[0][i], grads[1][i]), 0.0) << "parameter " << i;
  }
}

// [Note: the norm writes the products' operand]: a bf16 Llama's blocks read
// their dout and residual gradient as the norms after them wrote them, not
// through cast kernels, and every loss and gradient keeps its bits.
TEST_F(GptGpu, LlamaNormsWriteTheProductsOperandsWithTheCastsBits) {
  const ModelShape s = llama_shape("llama operands", 2, 64, 4, 2, 96, 97, 32);
  const Model model = build_model(describe_llama(s));
  const std::vector<const Unit*> uv = model.units();
  const int64_t B = 3;
  const int head = static_cast<int>(uv.size()) - 1;
  const Tensor tok = host_tensor(DType::i32, Shape{B, s.seq_len}), tg = host_tensor(DType::i32, Shape{B, s.seq_len});
  fill_tokens(tok, rng_key(seed, 1), s.vocab);
  fill_tokens(tg, rng_key(seed, 2), s.vocab);
  FlatStore init(*host, uv, DType::bf16, seed);
  const Tensor tok_d = to_gpu(tok), tg_d = to_gpu(tg), w_d = to_gpu(loss_weights(B, s.seq_len));
  std::vector<std::vector<double>> got[2];
  std::string report[2];
  for (int on = 0; on < 2; ++on) {
    ProfiledKernels prof(std::make_unique<CudaKernels>(*gpu), gpu->stream());
    DeviceStore store(*gpu, uv, init, DType::bf16);
    UnitRunner runner(uv, prof, *gpu, DType::bf16, DType::bf16, false);
    runner.set_grad_operands(on == 1);
    MicroBatchState mb(*gpu, static_cast<int>(uv.size()));
    got[on].push_back(step(runner, mb, store, store, tok_d, tg_d, w_d, head));
    for (int u = 0; u <= head; ++u)
      for (int p = 0; p < init.num_params(u); ++p) got[on].push_back(values(store.grad(u, p)));
    report[on] = prof.report(1, 1.0);
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  for (size_t i = 0; i < got[0].size(); ++i) EXPECT_TRUE(got[0][i] == got[1][i]) << (i ? "gradient " : "losses ") << i;
  // Within a block the norm writes the residual gradient's operand either
  // way; off, each block's dout is cast.
  EXPECT_NE(report[0].find("matmul operand f32->bf16"), std::string::npos) << report[0];
  EXPECT_EQ(report[1].find("matmul operand f32->bf16"), std::string::npos) << "a cast kernel is left:\n" << report[1];
  EXPECT_NE(report[1].find("rmsnorm_bwd+operand"), std::string::npos) << report[1];
}

}  // namespace
}  // namespace zt::test
