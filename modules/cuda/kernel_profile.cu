// ProfiledKernels: see [Note: kernel profile] in kernel_profile.hpp.
#include "modules/cuda/kernel_profile.hpp"
#include "modules/cuda/lt_tune.cuh"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "modules/cuda/common.cuh"

namespace zt {
namespace {

constexpr size_t kDrainAt = 4096;  // pending records before they are read

double bytes_of(std::initializer_list<const Tensor*> ts) {
  double b = 0;
  for (const Tensor* t : ts)
    if (t->defined()) b += static_cast<double>(t->bytes());
  return b;
}

int64_t rows(const Tensor& t) { return t.shape.rank() == 0 ? 1 : t.numel() / t.shape[-1]; }
int64_t cols(const Tensor& t) { return t.shape.rank() == 0 ? 1 : t.shape[-1]; }

std::string dt(const Tensor& t) { return dtype_name(t.dtype); }

// Causal attention FLOPs of the forward: 2 products of B H T^2 hs, halved.
double attn_flops(int64_t B, int64_t T, int64_t H, int64_t hs) {
  return 2.0 * static_cast<double>(B) * static_cast<double>(H) * static_cast<double>(T) * static_cast<double>(T) *
         static_cast<double>(hs);
}

}  // namespace

ProfiledKernels::ProfiledKernels(std::unique_ptr<Kernels> inner, cudaStream_t stream)
    : inner_(std::move(inner)), stream_(stream) {
  ZT_CHECK(inner_ != nullptr && inner_->device() == DeviceKind::cuda, "the kernel profile needs the CUDA kernels");
}

ProfiledKernels::~ProfiledKernels() {
  for (const Pending& p : pending_) {
    (void)cudaEventDestroy(p.start);
    (void)cudaEventDestroy(p.stop);
  }
  for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
}

cudaEvent_t ProfiledKernels::event() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  ZT_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

template <typename Fn>
void ProfiledKernels::timed(std::string key, double flops, double bytes, Fn&& fn) {
  if (pending_.size() >= kDrainAt) drain();
  Pending p{std::move(key), flops, bytes, event(), event(), 0.0};
  ZT_CUDA_CHECK(cudaEventRecord(p.start, stream_));
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  p.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ZT_CUDA_CHECK(cudaEventRecord(p.stop, stream_));
  pending_.push_back(std::move(p));
}

void ProfiledKernels::drain() {
  if (pending_.empty()) return;
  ZT_CUDA_CHECK(cudaEventSynchronize(pending_.back().stop));
  for (Pending& p : pending_) {
    float ms = 0;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
    Class& c = classes_[p.key];
    c.ms += ms;
    c.flops += p.flops;
    c.bytes += p.bytes;
    c.host_ms += p.host_ms;
    ++c.calls;
    free_.push_back(p.start);
    free_.push_back(p.stop);
  }
  pending_.clear();
}

void ProfiledKernels::reset() {
  drain();
  classes_.clear();
}

std::string ProfiledKernels::report(int64_t steps, double wall_seconds) {
  drain();
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  std::vector<std::pair<std::string, Class>> v(classes_.begin(), classes_.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  for (const auto& [k, c] : v) total += c.ms;
  const double wall_ms = wall_seconds * 1e3 / n;
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "kernel profile: %lld steps, %.2f ms wall per step, %.2f ms of it in kernels\n",
                static_cast<long long>(steps), wall_ms, total / n);
  os << line;
  std::snprintf(line, sizeof line, "  %-58s %9s %7s %7s %12s %13s\n", "class", "ms/step", "share", "calls", "rate",
                "host us/call");
  os << line;
  for (const auto& [k, c] : v) {
    char rate[64] = "";
    if (c.flops > 0)
      std::snprintf(rate, sizeof rate, "%.1f TFLOP/s", c.flops / (c.ms * 1e-3) / 1e12);
    else if (c.bytes > 0)
      std::snprintf(rate, sizeof rate, "%.0f GB/s", c.bytes / (c.ms * 1e-3) / 1e9);
    std::snprintf(line, sizeof line, "  %-58s %9.3f %6.1f%% %7.1f %12s %13.1f\n", k.c_str(), c.ms / n,
                  wall_ms > 0 ? 100.0 * c.ms / n / wall_ms : 0.0, static_cast<double>(c.calls) / n, rate,
                  c.calls > 0 ? 1e3 * c.host_ms / static_cast<double>(c.calls) : 0.0);
    os << line;
  }
  std::snprintf(line, sizeof line, "  %-58s %9.3f %6.1f%%\n",
                "outside Kernels (optimizer, communication, copies, gaps)", wall_ms - total / n,
                wall_ms > 0 ? 100.0 * (wall_ms - total / n) / wall_ms : 0.0);
  os << line;
  const std::vector<cuda::LtChoiceRecord> choices = cuda::lt_choices_made();
  if (!choices.empty()) os << "cuBLASLt algorithms chosen by timing ([Note: timed algorithm choice]):\n";
  for (const cuda::LtChoiceRecord& r : choices) os << "  " << r.what << ": " << r.choice.str() << "\n";
  return os.str();
}

void ProfiledKernels::matmul(Arena& ws, const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b,
                             bool trans_b, bool accumulate, const Tensor& bias) {
  const int64_t M = rows(out), N = cols(out), K = trans_a ? rows(a) : cols(a);
  const std::string key = "matmul " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " +
                          dt(a) + (trans_a ? "^T" : "") + "." + dt(b) + (trans_b ? "^T" : "") + "->" + dt(out) +
                          (accumulate ? " +=" : "");
  timed(key, 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K), 0,
        [&] { inner_->matmul(ws, out, a, trans_a, b, trans_b, accumulate, bias); });
}
void ProfiledKernels::bias_grad(const Tensor& dbias, const Tensor& dout) {
  timed("bias_grad", 0, bytes_of({&dbias, &dout}), [&] { inner_->bias_grad(dbias, dout); });
}
void ProfiledKernels::layernorm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                    const Tensor& w, const Tensor& b, const Tensor& x_copy) {
  timed("layernorm_fwd", 0, bytes_of({&out, &x, &x_copy}),
        [&] { inner_->layernorm_fwd(out, mean, rstd, x, w, b, x_copy); });
}
void ProfiledKernels::layernorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& db,
                                    const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& dres) {
  timed("layernorm_bwd", 0,
        bytes_of({&dx, &dout, &x, &dres}) + (accumulate_dx ? static_cast<double>(dx.bytes()) : 0.0),
        [&] { inner_->layernorm_bwd(dx, accumulate_dx, dw, db, dout, x, w, mean, rstd, dres); });
}
void ProfiledKernels::attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head,
                                    const Tensor& doc_start) {
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  timed("attention_fwd " + dt(qkv) + " hs " + std::to_string(C / n_head), attn_flops(B, T, n_head, C / n_head), 0,
        [&] { inner_->attention_fwd(ws, out, lse, qkv, n_head, doc_start); });
}
void ProfiledKernels::attention_bwd(Arena& ws, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                    const Tensor& out, const Tensor& lse, int n_head, const Tensor& doc_start) {
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  timed("attention_bwd " + dt(qkv) + " hs " + std::to_string(C / n_head),
        2.5 * attn_flops(B, T, n_head, C / n_head), 0,
        [&] { inner_->attention_bwd(ws, dqkv, dout, qkv, out, lse, n_head, doc_start); });
}
void ProfiledKernels::rmsnorm_fwd(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& w,
                                  double eps, const Tensor& x_copy) {
  timed("rmsnorm_fwd", 0, bytes_of({&out, &x, &x_copy}), [&] { inner_->rmsnorm_fwd(out, rstd, x, w, eps, x_copy); });
}
void ProfiledKernels::rmsnorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& dout,
                                  const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres,
                                  const Tensor& dx_operand) {
  timed(dx_operand.defined() ? "rmsnorm_bwd+operand" : "rmsnorm_bwd", 0,
        bytes_of({&dx, &dout, &x, &dres, &dx_operand}) + (accumulate_dx ? static_cast<double>(dx.bytes()) : 0.0),
        [&] { inner_->rmsnorm_bwd(dx, accumulate_dx, dw, dout, x, w, rstd, dres, dx_operand); });
}
void ProfiledKernels::rope_fwd(const Tensor& q, const Tensor& k, const RopeConfig& rope, const Tensor& doc_start) {
  timed("rope_fwd", 0, 2.0 * bytes_of({&q, &k}), [&] { inner_->rope_fwd(q, k, rope, doc_start); });
}
void ProfiledKernels::rope_bwd(const Tensor& dq, const Tensor& dk, const RopeConfig& rope, const Tensor& doc_start) {
  timed("rope_bwd", 0, 2.0 * bytes_of({&dq, &dk}), [&] { inner_->rope_bwd(dq, dk, rope, doc_start); });
}
void ProfiledKernels::gqa_attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& q,
                                        const Tensor& k, const Tensor& v, int n_head, int n_kv_head,
                                        const Tensor& doc_start) {
  const int64_t hs = q.shape[2] / n_head;
  timed("gqa_attention_fwd " + dt(q) + " hs " + std::to_string(hs) + (doc_start.defined() ? " docs" : ""),
        attn_flops(q.shape[0], q.shape[1], n_head, hs), 0,
        [&] { inner_->gqa_attention_fwd(ws, out, lse, q, k, v, n_head, n_kv_head, doc_start); });
}
void ProfiledKernels::gqa_attention_bwd(Arena& ws, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                        const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse, int n_head, int n_kv_head,
                                        const Tensor& doc_start) {
  const int64_t hs = q.shape[2] / n_head;
  timed("gqa_attention_bwd " + dt(q) + " hs " + std::to_string(hs) + (doc_start.defined() ? " docs" : ""),
        2.5 * attn_flops(q.shape[0], q.shape[1], n_head, hs), 0,
        [&] { inner_->gqa_attention_bwd(ws, dq, dk, dv, dout, q, k, v, out, lse, n_head, n_kv_head, doc_start); });
}
void ProfiledKernels::swiglu_fwd(const Tensor& out, const Tensor& gate, const Tensor& up) {
  timed("swiglu_fwd", 0, bytes_of({&out, &gate, &up}), [&] { inner_->swiglu_fwd(out, gate, up); });
}
void ProfiledKernels::swiglu_bwd(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                                 const Tensor& up) {
  timed("swiglu_bwd", 0, bytes_of({&dgate, &dup, &dout, &gate, &up}),
        [&] { inner_->swiglu_bwd(dgate, dup, dout, gate, up); });
}
void ProfiledKernels::gelu_fwd(const Tensor& out, const Tensor& x) {
  timed("gelu_fwd", 0, bytes_of({&out, &x}), [&] { inner_->gelu_fwd(out, x); });
}
void ProfiledKernels::gelu_bwd(const Tensor& din, const Tensor& dout, const Tensor& x) {
  timed("gelu_bwd", 0, bytes_of({&din, &dout, &x}), [&] { inner_->gelu_bwd(din, dout, x); });
}
void ProfiledKernels::classifier_fwd(Arena& ws, const Tensor& losses, const Tensor& lse, const Tensor& x,
                                     const Tensor& w, const Tensor& targets) {
  const double f = 2.0 * static_cast<double>(rows(x)) * static_cast<double>(rows(w)) * static_cast<double>(cols(x));
  timed("classifier_fwd " + dt(x) + " V " + std::to_string(rows(w)), f, 0,
        [&] { inner_->classifier_fwd(ws, losses, lse, x, w, targets); });
}
void ProfiledKernels::classifier_bwd(Arena& ws, const Tensor& dx, const Tensor& dw, const Tensor& dloss,
                                     const Tensor& x, const Tensor& w, const Tensor& targets, const Tensor& lse) {
  const double f = 4.0 * static_cast<double>(rows(x)) * static_cast<double>(rows(w)) * static_cast<double>(cols(x));
  timed("classifier_bwd " + dt(x) + " V " + std::to_string(rows(w)), f, 0,
        [&] { inner_->classifier_bwd(ws, dx, dw, dloss, x, w, targets, lse); });
}
void ProfiledKernels::classifier_fwd_bwd(Arena& ws, const Tensor& losses, const Tensor& dx, const Tensor& dw,
                                         const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& targets) {
  const double f = 6.0 * static_cast<double>(rows(x)) * static_cast<double>(rows(w)) * static_cast<double>(cols(x));
  timed("classifier_fwd_bwd " + dt(x) + " V " + std::to_string(rows(w)), f, 0,
        [&] { inner_->classifier_fwd_bwd(ws, losses, dx, dw, dloss, x, w, targets); });
}
void ProfiledKernels::embedding_fwd(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                    const Tensor& doc_start) {
  timed("embedding_fwd", 0, 2.0 * static_cast<double>(out.bytes()),
        [&] { inner_->embedding_fwd(out, tokens, wte, wpe, doc_start); });
}
void ProfiledKernels::embedding_bwd(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                    const Tensor& doc_start) {
  timed("embedding_bwd", 0, 3.0 * static_cast<double>(dout.bytes()),
        [&] { inner_->embedding_bwd(dwte, dwpe, dout, tokens, doc_start); });
}
void ProfiledKernels::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  timed("add", 0, bytes_of({&out, &a, &b}), [&] { inner_->add(out, a, b); });
}
void ProfiledKernels::cast(const Tensor& dst, const Tensor& src) {
  timed("cast " + dt(src) + "->" + dt(dst), 0, bytes_of({&dst, &src}), [&] { inner_->cast(dst, src); });
}
Tensor ProfiledKernels::matmul_operand(Arena& ws, const Tensor& t, DType partner) {
  Tensor out;
  timed("matmul operand " + dt(t) + "->" + dtype_name(partner), 0,
        t.dtype == partner ? 0.0 : static_cast<double>(t.numel()) * (dtype_size(t.dtype) + dtype_size(partner)),
        [&] { out = inner_->matmul_operand(ws, t, partner); });
  return out;
}
Tensor ProfiledKernels::bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout, DType partner) {
  Tensor out;
  timed("bias_grad+operand " + dt(dout) + "->" + dtype_name(partner), 0,
        bytes_of({&dbias, &dout}) + (dout.dtype == partner ? 0.0 : static_cast<double>(dout.numel() * dtype_size(partner))),
        [&] { out = inner_->bias_grad_and_operand(ws, dbias, dout, partner); });
  return out;
}
Tensor ProfiledKernels::gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout,
                                                       const Tensor& x, DType partner) {
  Tensor out;
  timed("gelu_bwd+bias_grad+operand " + dt(x) + "->" + dtype_name(partner), 0,
        bytes_of({&dbias, &dout, &x}) + (dout.dtype == partner ? 0.0 : static_cast<double>(dout.numel() * dtype_size(partner))),
        [&] { out = inner_->gelu_bwd_bias_grad_and_operand(ws, dbias, dout, x, partner); });
  return out;
}
void ProfiledKernels::matmul_bias_gelu(Arena& ws, const Tensor& out, const Tensor& pre, const Tensor& a,
                                       const Tensor& w, bool trans_w, const Tensor& bias) {
  const int64_t M = rows(pre), N = cols(pre), K = cols(a);
  timed("matmul+bias+gelu " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " + dt(a),
        2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K), 0,
        [&] { inner_->matmul_bias_gelu(ws, out, pre, a, w, trans_w, bias); });
}
Tensor ProfiledKernels::matmul_gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, DType math,
                                                              const Tensor& dout, const Tensor& w, bool trans_w,
                                                              const Tensor& pre, DType partner) {
  Tensor out;
  const int64_t M = rows(pre), N = cols(pre), K = cols(dout);
  timed("matmul+gelu_bwd+bias_grad " + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " +
            dt(dout) + "->" + dtype_name(partner),
        2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K), 0,
        [&] { out = inner_->matmul_gelu_bwd_bias_grad_and_operand(ws, dbias, math, dout, w, trans_w, pre, partner); });
  return out;
}
Tensor ProfiledKernels::attention_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dqkv,
                                                            const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                                            const Tensor& lse, int n_head, const Tensor& doc_start,
                                                            DType partner) {
  Tensor r;
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  timed("attention_bwd+bias_grad+operand " + dt(qkv) + " hs " + std::to_string(C / n_head),
        2.5 * attn_flops(B, T, n_head, C / n_head), 0,
        [&] { r = inner_->attention_bwd_bias_grad_and_operand(ws, dbias, dqkv, dout, qkv, out, lse, n_head, doc_start,
                                                              partner); });
  return r;
}
void ProfiledKernels::zero(const Tensor& t) {
  timed("zero", 0, static_cast<double>(t.bytes()), [&] { inner_->zero(t); });
}
void ProfiledKernels::zero_spans(const Tensor& flat, const std::vector<ZeroSpan>& spans) {
  double bytes = 0;
  for (const ZeroSpan& s : spans) bytes += static_cast<double>(s.end - s.begin) * static_cast<double>(dtype_size(flat.dtype));
  timed("zero spans", 0, bytes, [&] { inner_->zero_spans(flat, spans); });
}
void ProfiledKernels::scale(const Tensor& x, double alpha) {
  timed("scale", 0, 2.0 * static_cast<double>(x.bytes()), [&] { inner_->scale(x, alpha); });
}
void ProfiledKernels::sum_squares(const Tensor& x, const Tensor& acc) {
  timed("sum_squares", 0, static_cast<double>(x.bytes()), [&] { inner_->sum_squares(x, acc); });
}
void ProfiledKernels::sum_into(const Tensor& x, const Tensor& acc) {
  timed("sum_into", 0, static_cast<double>(x.bytes()), [&] { inner_->sum_into(x, acc); });
}
void ProfiledKernels::check_overflow(const Tensor& x, const Tensor& flag) {
  timed("check_overflow", 0, static_cast<double>(x.bytes()), [&] { inner_->check_overflow(x, flag); });
}

}  // namespace zt

namespace zt {

double measure_bf16_peak_flops(Device& dev, Kernels& kernels, cudaStream_t stream) {
  constexpr int64_t n = 8192;
  constexpr size_t bytes = static_cast<size_t>(n * n) * 2;
  // Straight from the driver, not through `dev`: the operands are gone before
  // training starts and must not appear in the run's peak memory per tag.
  void* p[3] = {nullptr, nullptr, nullptr};
  for (void*& q : p) {
    if (cudaMalloc(&q, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      for (void* r : p) (void)cudaFree(r);
      return 0;
    }
  }
  // Random operands: products of zeros draw less power and run faster than
  // training's (884 against 771 TFLOP/s seen on an H200).
  {
    std::vector<uint16_t> h(static_cast<size_t>(n * n));
    uint32_t x = 2463534242u;
    for (uint16_t& v : h) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      const float f = static_cast<float>(static_cast<int>(x % 2001) - 1000) / 1000.0f;
      uint32_t u = 0;
      std::memcpy(&u, &f, sizeof u);
      v = static_cast<uint16_t>(u >> 16);  // bf16: the upper half of the float
    }
    ZT_CUDA_CHECK(cudaMemcpy(p[0], h.data(), bytes, cudaMemcpyHostToDevice));
    ZT_CUDA_CHECK(cudaMemcpy(p[1], h.data(), bytes, cudaMemcpyHostToDevice));
  }
  const Tensor ta(p[0], DType::bf16, Shape{n, n}, DeviceKind::cuda);
  const Tensor tb(p[1], DType::bf16, Shape{n, n}, DeviceKind::cuda);
  const Tensor tc(p[2], DType::bf16, Shape{n, n}, DeviceKind::cuda);
  Arena ws(dev, MemTag::workspace);  // bf16 x bf16 -> bf16 takes nothing from it
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  ZT_CUDA_CHECK(cudaEventCreate(&e0));
  ZT_CUDA_CHECK(cudaEventCreate(&e1));
  float best = 0;
  for (int i = 0; i < 6; ++i) {  // the first one warms up
    ZT_CUDA_CHECK(cudaEventRecord(e0, stream));
    kernels.matmul(ws, tc, ta, false, tb, true, false);
    ZT_CUDA_CHECK(cudaEventRecord(e1, stream));
    ZT_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i > 0 && (best == 0 || ms < best)) best = ms;
  }
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  for (void* q : p) (void)cudaFree(q);
  return best > 0 ? 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (best * 1e-3)
                  : 0;
}

}  // namespace zt
