// The parameter seam. A Model is an ordered list of units (embedding, blocks,
// final norm + head). A unit declares its parameters and runs forward and
// backward, but never owns parameter memory: before it runs, the caller asks a
// ParamProvider for views of its parameters; after its backward, gradients go
// to buffers handed out by a GradSink. ZeRO implements both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "runtime/device.hpp"

namespace zt {

class Kernels;

struct ParamSpec {
  std::string name;   // e.g. "attn.c_attn.weight"
  Shape shape;
  bool weight_decay;  // AdamW decay applies (2-D weights only)
  // The backward writes this parameter's whole gradient with one product
  // and overwrites it when UnitContext::grads_fresh ([Note: gradients
  // written, not zeroed] in zero/zero_engine.hpp).
  bool grad_overwritten = false;
};

// A parameter of another unit that this unit reads (tied embeddings): its
// views come after the unit's own, and its gradient accumulates into the
// owner's gradient buffer.
struct TiedParam {
  int unit;
  int param;
};

enum class Phase : uint8_t { forward, backward, recompute };

// The precision of everything a unit computes in, given a storage dtype:
// f64 storage (finite-difference tests) computes and keeps gradients in f64,
// every other storage (f32, bf16, f16) in f32. Parameter gradients, activation
// gradients, LayerNorm statistics and per-token losses use this dtype.
inline DType math_dtype(DType storage) { return storage == DType::f64 ? DType::f64 : DType::f32; }

struct UnitContext {
  Kernels* kernels = nullptr;
  Arena* saved = nullptr;    // activations kept until this micro-batch's backward
  Arena* scratch = nullptr;  // temporaries; the caller releases them after each call
  int64_t B = 0;             // micro-batch size
  int64_t T = 0;             // sequence length
  DType act_dtype = DType::f32;  // storage of activations (math is fp32 or wider)
  Tensor targets;            // (B, T) i32, read by the head; a negative target is ignored
  Tensor doc_start;          // (B, T) i32 or undefined: [Note: document masking] in kernels.hpp
  // [Note: loss in the backward] (modules/head_loss.hpp): a training walk,
  // whose head computes its losses in its backward; and where the head adds
  // its per-token losses (f64, one element), undefined for nowhere.
  bool loss_in_backward = false;
  Tensor loss_sum;
  // [Note: gradients written, not zeroed]: the gradients of this unit's own
  // parameters whose ParamSpec says grad_overwritten hold no value yet in
  // this step (they were not zeroed): the backward writes them, not adds.
  // The other gradients are zero or hold earlier micro-batches' sums, as
  // always. Set by the runner from GradSink::grads_fresh.
  bool grads_fresh = false;
  // [Note: the norm writes the products' operand] (kernels.hpp): dout as the
  // backend's products read it (act_dtype), written by the unit after this
  // one together with its din; undefined where none was written. And where
  // this unit's backward may write its din's operand (act_dtype, din's
  // shape), setting `written`; null for nowhere. Only for units whose
  // writes_din_operand() is true.
  Tensor dout_operand;
  struct GradOperand {
    Tensor space;
    bool written = false;
  };
  GradOperand* din_operand = nullptr;
};

// What a unit's forward keeps for its backward (views into ctx.saved).
struct Stash {
  std::vector<Tensor> t;
};

class Unit {
 public:
  virtual ~Unit() = default;
  virtual std::string name() const = 0;
  virtual std::vector<ParamSpec> params() const = 0;
  virtual std::vector<TiedParam> tied() const { return {}; }
  // Whether activation checkpointing may drop this unit's stash after forward
  // and re-run its forward before backward (blocks: yes; embedding, head: no).
  virtual bool checkpointable() const { return false; }
  // Whether backward may write its din's products' operand when offered
  // (UnitContext::din_operand).
  virtual bool writes_din_operand() const { return false; }
  // Input and output of one micro-batch.
  virtual Shape input_shape(int64_t B, int64_t T) const = 0;
  virtual DType input_dtype(DType act_dtype) const = 0;
  virtual Shape output_shape(int64_t B, int64_t T) const = 0;
  virtual DType output_dtype(DType act_dtype) const = 0;
  // Deterministic initial value of elements [begin, begin+count) of own
  // parameter `param`, a pure function of (seed, unit index, param, element),
  // so that any sharding of the parameters initialises identically. Called
  // from several threads at once on disjoint ranges.
  virtual void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                          int unit_index) const = 0;

  // params: own then tied, in the storage dtype. `out` is preallocated.
  virtual void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
                       const Tensor& out, Stash& stash) const = 0;
  // grads: own then tied, fp32 (f64 when the parameters are f64), accumulated
  // into (+=). `dout` and `din` are in math_dtype(act_dtype); `din` is
  // written (not accumulated) and is undefined for the first unit (token input).
  virtual void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                        const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                        const Tensor& din, Stash& stash) const = 0;
};

class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  // Views of unit's own then tied parameters, valid until release(unit, phase).
  virtual std::vector<Tensor> acquire(int unit, Phase phase) = 0;
  virtual void release(int unit, Phase phase) = 0;
  // [Note: breadth-first walk] (pipeline/executor.hpp): from now on each
  // unit is acquired and released n times in a row in each phase (n
  // micro-batches) before the walk moves on; 1 = the usual order. A hint for
  // what to keep: a provider may ignore it.
  virtual void set_run_length(int n) { (void)n; }
};

class GradSink {
 public:
  virtual ~GradSink() = default;
  // Gradient buffers (own then tied) that the unit's backward accumulates
  // into: fp32, or f64 when the parameters are f64 (math_dtype of the params).
  virtual std::vector<Tensor> grads(int unit) = 0;
  // [Note: gradients written, not zeroed]: whether the unit's next backward
  // is the first to write its grad_overwritten gradients in this step, which
  // the sink left unzeroed (UnitContext::grads_fresh). False: every gradient
  // buffer is added into.
  virtual bool grads_fresh(int unit) {
    (void)unit;
    return false;
  }
  // The unit's backward for the current micro-batch has finished.
  virtual void done(int unit) = 0;
  // [Note: breadth-first walk]: from now on each unit's backward runs n
  // times in a row (n micro-batches, each adding into the same buffers)
  // before the next unit's; 1 = the usual order. A sink may ignore it.
  virtual void set_run_length(int n) { (void)n; }
};

}  // namespace zt
