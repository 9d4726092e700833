// The Kernels table: every numeric operation a GPT-2 or Llama unit performs,
// on non-owning Tensor views. CpuKernels is the reference; a CUDA implementation
// provides the same table. Units never touch element data themselves.
//
// Dtypes. A call mixes at most three kinds of tensors:
//   storage  parameters and activations: f32, bf16, f16, or f64 (tests);
//   math     gradients, LayerNorm statistics, log-sum-exps, losses:
//            math_dtype(storage) — f32, or f64 when storage is f64;
//   index    tokens and targets: i32.
// Arithmetic is done in the math dtype (f32 accumulation for 16-bit storage).
// Tensors of rank > 2 passed where a matrix is expected are read as
// (numel / last dim, last dim), so (B, T, C) is the matrix (B*T, C).
//
// Workspace. Calls that need temporaries take an Arena and return it as they
// found it (mark/release), so a step allocates nothing once the arena has grown.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "modules/rope.hpp"
#include "runtime/device.hpp"

namespace zt {

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual DeviceKind device() const = 0;

  // ---- dense -------------------------------------------------------------
  // out (M, N) = [out +] op(a) · op(b) [+ bias], row-major, with op(a) (M, K)
  // and op(b) (K, N): a is stored (M, K), or (K, M) when trans_a; b is stored
  // (K, N), or (N, K) when trans_b. bias (N) is optional. A linear layer with
  // weight W (OC, IC) is: y = matmul(x, W, trans_b) + b; dx = matmul(dy, W);
  // dW += matmul(dy, x, trans_a) with accumulate.
  virtual void matmul(Arena& ws, const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b,
                      bool trans_b, bool accumulate, const Tensor& bias = Tensor()) = 0;
  // `t` as this backend's matmul reads it beside an operand of dtype
  // `partner`: the CUDA products multiply 16-bit inputs on tensor cores and
  // round an f32 operand to the 16-bit partner's dtype, the CPU reads it as
  // it is (the default). A caller that passes one f32 gradient to two
  // products converts it once with this (into ws) instead of once per
  // product; the products' results are the same bits.
  virtual Tensor matmul_operand(Arena& ws, const Tensor& t, DType partner) {
    (void)ws, (void)partner;
    return t;
  }
  // dbias (N) += column sums of dout (M, N).
  virtual void bias_grad(const Tensor& dbias, const Tensor& dout) = 0;
  // bias_grad(dbias, dout), then matmul_operand(ws, dout, partner): a
  // product's output gradient read once for its bias and for the two
  // products that take it, where the backend fuses them (CUDA: one kernel
  // that sums the columns and writes the 16-bit operand). The results are
  // the bits of the two calls.
  virtual Tensor bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout, DType partner) {
    bias_grad(dbias, dout);
    return matmul_operand(ws, dout, partner);
  }

  // ---- layer norm over the last dimension, eps = 1e-5 ---------------------
  // out (N, C) = (x - mean) * rstd * w + b; mean, rstd (N) in math dtype.
  // x_copy, when defined, also receives x ([Note: residual stream]).
  virtual void layernorm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                             const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& x_copy = Tensor()) = 0;
  // dx (N, C) = (or += when accumulate_dx) the input gradient; dw, db (C) +=.
  // dres (N, C), math dtype, when defined: dx = dres + the input gradient
  // (accumulate_dx must be false) ([Note: residual stream]).
  virtual void layernorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw,
                             const Tensor& db, const Tensor& dout, const Tensor& x,
                             const Tensor& w, const Tensor& mean, const Tensor& rstd,
                             const Tensor& dres = Tensor()) = 0;
  // [Note: norms' dout in 16 bits] The dtype in which layernorm_bwd and
  // rmsnorm_bwd take dout for an input x: `math`, or x's 16-bit dtype where
  // the backend reads dout in it (CUDA). The product that makes dout then
  // writes it rounded once from its f32 sum, as PyTorch's autocast does
  // (its norms run in f32 on the 16-bit products' gradients), and the norm
  // reads half the bytes. dx, dres, dw and db stay in math dtype.
  virtual DType norm_bwd_dout_dtype(const Tensor& x, DType math) {
    (void)x;
    return math;
  }

  // [Note: residual stream] A pre-norm block computes y = x + f(norm(x)).
  // The residual add has no pass of its own: the branch's last product
  // accumulates onto a copy of x (GEMM beta = 1), and that copy is written by
  // the norm, which reads x anyway (x_copy). In the backward the residual's
  // gradient and the norm's input gradient are summed by the norm's
  // backward (dres), which writes dx once. Either way the norm and the
  // residual add are one pass over the activations instead of two.

  // ---- document masking ------------------------------------------------------
  // [Note: document masking] Packed fine-tuning sequences hold several whole
  // examples. doc_start (B, T) i32, when defined, gives for token t of row b
  // the index in that row of the first token of t's document. Then query t
  // attends only to keys j with doc_start[b, t] <= j <= t, and its position
  // (the GPT position table, the rotary angle) is t - doc_start[b, t]. An
  // undefined doc_start (Tensor()) is a plain corpus: doc_start = 0
  // everywhere, which is exactly the unmasked computation.

  // ---- causal multi-head self-attention -----------------------------------
  // qkv (B, T, 3C) holds [q | k | v]; head h uses columns [h*hs, (h+1)*hs) of
  // each third, hs = C / n_head. out (B, T, C) = softmax(q k^T / sqrt(hs),
  // causal) v. lse (B, n_head, T) keeps each query's log-sum-exp of scaled
  // scores so that backward recomputes the probabilities instead of storing
  // (B, n_head, T, T).
  virtual void attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             int n_head, const Tensor& doc_start) = 0;
  // dqkv (B, T, 3C) written from dout (B, T, C); out is the forward's output.
  virtual void attention_bwd(Arena& ws, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                             const Tensor& out, const Tensor& lse, int n_head, const Tensor& doc_start) = 0;
  // attention_bwd, then bias_grad_and_operand(ws, dbias, dqkv, partner):
  // where the backend's attention makes 16-bit gradients and partner is
  // their dtype (CUDA with cuDNN), the operand is those gradients as they
  // come and dqkv is left unspecified. Same bits as the separate calls.
  virtual Tensor attention_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dqkv,
                                                     const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                                     const Tensor& lse, int n_head, const Tensor& doc_start,
                                                     DType partner) {
    attention_bwd(ws, dqkv, dout, qkv, out, lse, n_head, doc_start);
    return bias_grad_and_operand(ws, dbias, dqkv, partner);
  }
  // [Note: attention's dout in 16 bits] The dtype in which the attention
  // backwards (attention_bwd, attention_bwd_bias_grad_and_operand,
  // gqa_attention_bwd) would take dout for queries q (qkv, or q alone) and
  // doc_start: `math`, or q's 16-bit dtype where the backend's attention
  // rounds dout to it anyway (CUDA with cuDNN). The caller may then have the
  // product that makes dout write it in that dtype (its f32 sum rounded
  // once, as the backend would round it), and save the f32 write, read and
  // rounding pass. Backends that answer `math` take dout in `math` only.
  virtual DType attention_bwd_dout_dtype(const Tensor& qkv, const Tensor& doc_start, DType math) {
    (void)qkv;
    (void)doc_start;
    return math;
  }
  // [Note: attention's gradients in 16 bits] The dtype in which
  // gqa_attention_bwd may write dq, dk and dv for queries q, and rope_bwd then
  // rotate them: `math`, or q's 16-bit dtype where the backend's attention
  // makes its gradients in that dtype and widens them (CUDA with cuDNN). A
  // caller whose next products take the gradients in that dtype anyway (the
  // Llama block's q, k and v weight and input products) saves the widening,
  // the f32 rotation's traffic and the products' rounding passes; rope_bwd
  // computes in f32 and rounds once, so the operands keep their bits. (Where
  // cuDNN declines a shape after all, the flash kernels' f32 gradients are
  // rounded before the rotation: dq and dk carry one rounding more there.)
  virtual DType gqa_grad_dtype(const Tensor& q, const Tensor& doc_start, DType math) {
    (void)q;
    (void)doc_start;
    return math;
  }

  // ---- Llama: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU --
  // RMSNorm over the last dimension: out (N, C) = x * rstd * w, rstd (N) =
  // 1 / sqrt(mean(x^2) + eps) in math dtype.
  // x_copy as layernorm_fwd's.
  virtual void rmsnorm_fwd(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& w,
                           double eps, const Tensor& x_copy = Tensor()) = 0;
  // dx (N, C) = (or += when accumulate_dx) the input gradient; dw (C) +=;
  // dres as layernorm_bwd's. dx_operand, when defined (only where
  // norm_bwd_writes_operand says so), also receives dx's final value rounded
  // to its dtype ([Note: the norm writes the products' operand]).
  virtual void rmsnorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& dout,
                           const Tensor& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& dres = Tensor(), const Tensor& dx_operand = Tensor()) = 0;
  // [Note: the norm writes the products' operand] A pre-norm block's input
  // gradient dx (f32) is the residual stream's gradient: the block before
  // reads it as its dout, and the branch's two products (the weight
  // gradient and the input gradient of the branch's last product) read it
  // through matmul_operand, which on CUDA is a cast kernel over it. Where the
  // backend rounds an f32 operand beside `partner` (x's 16-bit dtype) and
  // its norm backward can write that rounding as it writes dx, this says
  // true, and rmsnorm_bwd's dx_operand is that operand: the bits of
  // matmul_operand(dx, partner), without a pass of its own. False by
  // default (the CPU's products read f32 at full precision).
  virtual bool norm_bwd_writes_operand(const Tensor& x, DType partner) {
    (void)x, (void)partner;
    return false;
  }
  // The attention inputs q (B, T, H * head_dim) and k (B, T, H_kv *
  // head_dim), storage dtype, rotated in place in one pass that takes each
  // (position, frequency)'s cos and sin once for every head of both; k may be
  // undefined. Token t of every sequence is at position t - doc_start[b, t]
  // (rope.hpp gives the convention and frequencies).
  virtual void rope_fwd(const Tensor& q, const Tensor& k, const RopeConfig& rope, const Tensor& doc_start) = 0;
  // dq, dk (shapes of q, k), in place: the transpose (inverse rotation), so
  // they become the gradients of the unrotated inputs. In the math dtype, or
  // in the dtype gqa_grad_dtype answers (computed in f32, rounded once).
  virtual void rope_bwd(const Tensor& dq, const Tensor& dk, const RopeConfig& rope, const Tensor& doc_start) = 0;
  // Causal grouped-query attention on separate q (B, T, n_head * hs), k and v
  // (B, T, n_kv_head * hs): query head h reads key/value head
  // h / (n_head / n_kv_head) (n_kv_head = 1: multi-query). out (B, T,
  // n_head * hs) and lse (B, n_head, T) as attention_fwd's.
  virtual void gqa_attention_fwd(Arena& ws, const Tensor& out, const Tensor& lse, const Tensor& q,
                                 const Tensor& k, const Tensor& v, int n_head, int n_kv_head,
                                 const Tensor& doc_start) = 0;
  // dq, dk, dv (shapes of q, k, v) written from dout, in the math dtype or
  // in the dtype gqa_grad_dtype answers.
  virtual void gqa_attention_bwd(Arena& ws, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse, int n_head, int n_kv_head,
                                 const Tensor& doc_start) = 0;
  // out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); all (N, F).
  virtual void swiglu_fwd(const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  // dgate, dup written from dout (math dtype): in the math dtype, or in the
  // storage dtype of gate (rounded once), which is what the products that
  // read them take on the GPU; dgate may alias dout in the math dtype.
  virtual void swiglu_bwd(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                          const Tensor& up) = 0;

  // ---- GELU, tanh approximation ------------------------------------------
  virtual void gelu_fwd(const Tensor& out, const Tensor& x) = 0;
  // din = dout * gelu'(x); din may alias dout.
  virtual void gelu_bwd(const Tensor& din, const Tensor& dout, const Tensor& x) = 0;
  // gelu_bwd(dout, dout, x), then bias_grad_and_operand(ws, dbias, dout,
  // partner): the returned operand holds the input gradient; dout is left
  // holding it or, where the operand is a 16-bit copy that the backend
  // writes directly (CUDA), unspecified. Same bits as the separate calls.
  virtual Tensor gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout,
                                                const Tensor& x, DType partner) {
    gelu_bwd(dout, dout, x);
    return bias_grad_and_operand(ws, dbias, dout, partner);
  }
  // The MLP's first product and its activation: pre (N, F) = a op(w) +
  // bias, out (N, F) = gelu(pre), a (N, K), w (K, F) or, trans_w, (F, K).
  // The default is matmul then gelu_fwd; a backend may apply GELU in the
  // product's epilogue (CUDA: [Note: GELU in the epilogue]).
  virtual void matmul_bias_gelu(Arena& ws, const Tensor& out, const Tensor& pre, const Tensor& a,
                                const Tensor& w, bool trans_w, const Tensor& bias) {
    matmul(ws, pre, a, false, w, trans_w, false, bias);
    gelu_fwd(out, pre);
  }
  // The MLP's backward through GELU from the product that gives it: d =
  // gelu'(pre) * (dout op(w)) with dout (N, K) (usually itself an operand),
  // w (K, F) or, trans_w, (F, K), pre (N, F); dbias (F) += column sums of d;
  // returns d as the operand of the products that read it, as
  // gelu_bwd_bias_grad_and_operand would. The default computes d in the math
  // dtype `math` (in `ws`) and calls that. A backend may instead apply GELU's
  // derivative in the product's epilogue and round d once to `partner`,
  // summing dbias from the rounded values (CUDA: [Note: GELU in the epilogue]
  // in modules/cuda/matmul.cuh).
  virtual Tensor matmul_gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, DType math,
                                                       const Tensor& dout, const Tensor& w, bool trans_w,
                                                       const Tensor& pre, DType partner) {
    const Tensor d = ws.alloc(math, pre.shape);
    matmul(ws, d, dout, false, w, trans_w, false);
    return gelu_bwd_bias_grad_and_operand(ws, dbias, d, pre, partner);
  }

  // ---- classifier fused with softmax cross-entropy -------------------------
  // Row n: logits = x[n] · w^T (V), lse[n] = logsumexp(logits),
  // losses[n] = lse[n] - logits[targets[n]]; a negative target gives loss 0.
  // x (N, C) storage, w (V, C) storage, targets (N) i32, losses and lse (N)
  // math. Logits exist only for a chunk of rows at a time, never (N, V).
  virtual void classifier_fwd(Arena& ws, const Tensor& losses, const Tensor& lse, const Tensor& x,
                              const Tensor& w, const Tensor& targets) = 0;
  // dloss (N) is the weight of each row's loss in the objective. Recomputes
  // the logits chunk by chunk: dx (N, C) written, dw (V, C) +=.
  virtual void classifier_bwd(Arena& ws, const Tensor& dx, const Tensor& dw, const Tensor& dloss,
                              const Tensor& x, const Tensor& w, const Tensor& targets,
                              const Tensor& lse) = 0;
  // Both directions in one call, for training, where the backward always
  // follows the forward ([Note: loss in the backward] in modules/head_loss.hpp):
  // losses (N) written, dx (N, C) written, dw (V, C) +=, with dloss known
  // beforehand. The default runs the two calls above in turn (the same
  // bits); a backend may share their products.
  virtual void classifier_fwd_bwd(Arena& ws, const Tensor& losses, const Tensor& dx, const Tensor& dw,
                                  const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& targets) {
    const ArenaScope scope(ws);
    const Tensor lse = ws.alloc(losses.dtype, losses.shape);
    classifier_fwd(ws, losses, lse, x, w, targets);
    classifier_bwd(ws, dx, dw, dloss, x, w, targets, lse);
  }
  // ZTRAIN_CLASSIFIER, the CUDA backend's classifier_fwd_bwd (read at every
  // call, and by the memory estimator for the device's figure): unset or
  // empty is [Note: classifier in one pass] (modules/cuda/classifier.cu) with
  // the logits in the storage dtype (f32 logits for f32 storage), the loss of
  // rounded logits as under PyTorch's autocast and torch.compile, for half
  // the traffic; "one-pass-f32" keeps f32 logits for 16-bit storage too;
  // "separate" is the forward then the backward (four products). Any other
  // value is an error that names it.
  enum class ClassifierPath : uint8_t { one_pass, one_pass_f32, separate };
  // The rows of each chunk of the CUDA one pass ([Note: classifier in one
  // pass]) over N rows of Vp logits of `logit_bytes` each, at most
  // chunk_bytes of logits a chunk: the fewest chunks the budget allows, of
  // equal rows (a multiple of 8, the last chunk shorter), so that no product
  // runs on a sliver of rows. The memory estimator counts the same chunk.
  static int64_t classifier_one_pass_rows(int64_t N, int64_t Vp, int64_t logit_bytes, int64_t chunk_bytes) {
    const int64_t cap = std::max<int64_t>(chunk_bytes / (Vp * logit_bytes) / 8 * 8, 8);
    const int64_t chunks = (N + cap - 1) / cap;
    return std::min<int64_t>(((N + chunks - 1) / chunks + 7) / 8 * 8, N);
  }
  static ClassifierPath classifier_path_from_env() {
    const char* env = std::getenv("ZTRAIN_CLASSIFIER");
    const std::string path = env == nullptr ? "" : env;
    if (path.empty()) return ClassifierPath::one_pass;
    if (path == "one-pass-f32") return ClassifierPath::one_pass_f32;
    if (path == "separate") return ClassifierPath::separate;
    ZT_USER_ERROR("ZTRAIN_CLASSIFIER=", path, ": unknown classifier path; leave it unset (one pass, logits in the "
                  "storage dtype) or use one-pass-f32 or separate");
  }

  // ---- token + position embedding ---------------------------------------
  // out (B, T, C) = wte[tokens[b, t]] + wpe[t - doc_start[b, t]]; wte (V, C),
  // wpe (T_max, C).
  // An undefined wpe (Tensor()) means no position embedding (Llama, whose
  // positions are rotary): out = wte[tokens[b, t]], and dwpe is not written.
  virtual void embedding_fwd(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                             const Tensor& wpe, const Tensor& doc_start) = 0;
  // dwte (V, C) +=, dwpe (T_max, C) += from dout (B, T, C).
  virtual void embedding_bwd(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                             const Tensor& tokens, const Tensor& doc_start) = 0;

  // ---- elementwise -------------------------------------------------------
  // out = a + b (residual add); out may alias a or b.
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  // dst = src converted to dst's dtype (same element count; f32/f64/bf16/f16).
  virtual void cast(const Tensor& dst, const Tensor& src) = 0;
  virtual void zero(const Tensor& t) = 0;
  // [Note: gradients written, not zeroed] (zero/zero_engine.hpp): zeroes
  // elements [begin, end) of the f32 tensor `flat` for every span, each at
  // most kZeroSpanMax elements (a backend may zero them all in one launch).
  // By default, one zero() a span.
  struct ZeroSpan {
    int64_t begin;
    int64_t end;
  };
  static constexpr int64_t kZeroSpanMax = int64_t{1} << 16;
  virtual void zero_spans(const Tensor& flat, const std::vector<ZeroSpan>& spans) {
    for (const ZeroSpan& s : spans) zero(flat.slice1d(s.begin, s.end - s.begin));
  }
  // x *= alpha, in place.
  virtual void scale(const Tensor& x, double alpha) = 0;

  // ---- reductions for the optimizer and the loss ----------------------------
  // Results stay on the device so that no host synchronisation is implied.
  // acc (1) f64 += sum of x^2.
  virtual void sum_squares(const Tensor& x, const Tensor& acc) = 0;
  // acc (1) f64 += sum of x (f32 or f64, any shape): the step's loss summed
  // on the device and read once per print interval. The CPU adds the elements
  // to acc one by one in index order, in f64, which gives the bits of the host
  // loop `for (float v : x) acc += v;`; the GPU sums in any order, in f64.
  virtual void sum_into(const Tensor& x, const Tensor& acc) = 0;
  // flag (1) i32 is set to 1 when x holds an inf or NaN (left as is otherwise).
  virtual void check_overflow(const Tensor& x, const Tensor& flag) = 0;
};

// `t` for several products whose other operands have the dtypes `partners`:
// converted once by the backend's matmul_operand when they all share one
// dtype, else `t` itself (each product then converts as it needs).
// shared_partner is the dtype to pass as matmul_operand's partner: the
// shared dtype, or t's own (no conversion) when the partners differ.
inline DType shared_partner(const Tensor& t, std::initializer_list<DType> partners) {
  const DType first = *partners.begin();
  for (DType d : partners)
    if (d != first) return t.dtype;
  return first;
}
inline Tensor shared_matmul_operand(Kernels& k, Arena& ws, const Tensor& t, std::initializer_list<DType> partners) {
  const DType partner = shared_partner(t, partners);
  return partner == t.dtype ? t : k.matmul_operand(ws, t, partner);
}

}  // namespace zt
