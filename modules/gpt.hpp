// GPT-2 as three kinds of units: EmbeddingUnit (wte, wpe), BlockUnit
// (pre-LayerNorm attention + MLP) and HeadUnit (ln_f and the LM head tied to
// wte, fused with the cross-entropy loss). Unit order in a model: 0 =
// embedding, 1..n_layer = blocks, n_layer + 1 = head.
//
// Names follow GPT-2's state dict: the full name of a parameter is
//   embedding:  "transformer." + param  (wte.weight, wpe.weight)
//   block i:    "transformer.h.<i>." + param (ln_1.weight, attn.c_attn.weight, ...)
//   head:       "transformer." + param  (ln_f.weight, ln_f.bias)
// Linear weights are stored (out, in) like torch.nn.Linear (HF's GPT-2 Conv1D
// stores the transpose; an exporter transposes c_attn, c_proj, c_fc).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "modules/unit.hpp"

namespace zt {

struct GptConfig {
  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;     // C
  int seq_len = 0;     // T_max: rows of wpe
  int vocab_size = 0;  // V: rows of wte
  void validate() const;  // throws UserError naming the bad field
};

class EmbeddingUnit final : public Unit {
 public:
  explicit EmbeddingUnit(const GptConfig& cfg) : cfg_(cfg) {}
  std::string name() const override { return "embedding"; }
  std::vector<ParamSpec> params() const override;  // wte.weight (V, C), wpe.weight (T_max, C)
  Shape input_shape(int64_t B, int64_t T) const override { return Shape{B, T}; }
  DType input_dtype(DType) const override { return DType::i32; }
  Shape output_shape(int64_t B, int64_t T) const override;
  DType output_dtype(DType act) const override { return act; }
  void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                  int unit_index) const override;
  void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
               const Tensor& out, Stash& stash) const override;
  void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                const Tensor& din, Stash& stash) const override;

 private:
  GptConfig cfg_;
};

class BlockUnit final : public Unit {
 public:
  BlockUnit(const GptConfig& cfg, int layer) : cfg_(cfg), layer_(layer) {}
  std::string name() const override { return "h." + std::to_string(layer_); }
  std::vector<ParamSpec> params() const override;
  bool checkpointable() const override { return true; }
  Shape input_shape(int64_t B, int64_t T) const override;
  DType input_dtype(DType act) const override { return act; }
  Shape output_shape(int64_t B, int64_t T) const override { return input_shape(B, T); }
  DType output_dtype(DType act) const override { return act; }
  void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                  int unit_index) const override;
  void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
               const Tensor& out, Stash& stash) const override;
  void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                const Tensor& din, Stash& stash) const override;
  int layer() const { return layer_; }

 private:
  GptConfig cfg_;
  int layer_;
};

class HeadUnit final : public Unit {
 public:
  explicit HeadUnit(const GptConfig& cfg) : cfg_(cfg) {}
  std::string name() const override { return "head"; }
  std::vector<ParamSpec> params() const override;  // ln_f.weight, ln_f.bias
  // The LM head is the embedding's wte (unit 0, param 0).
  std::vector<TiedParam> tied() const override { return {TiedParam{0, 0}}; }
  Shape input_shape(int64_t B, int64_t T) const override;
  DType input_dtype(DType act) const override { return act; }
  // Per-token loss (B, T) in math_dtype(act).
  Shape output_shape(int64_t B, int64_t T) const override { return Shape{B, T}; }
  DType output_dtype(DType act) const override { return math_dtype(act); }
  void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                  int unit_index) const override;
  void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
               const Tensor& out, Stash& stash) const override;
  // dout (B, T): the weight of each token's loss in the objective (the
  // trainer passes 1 / tokens in the global batch).
  void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                const Tensor& din, Stash& stash) const override;

 private:
  GptConfig cfg_;
};

// The units of a GPT-2: embedding, n_layer blocks, head.
std::vector<std::unique_ptr<Unit>> build_gpt(const GptConfig& cfg);

// Parameters held by the units (own parameters only: a tied one counts once).
int64_t count_params(const std::vector<const Unit*>& units);

// Training FLOPs per token (forward + backward), the PaLM / nanoGPT estimate:
//   6 * N + 12 * n_layer * d_model * seq_len,
// N = count_params minus the position embedding (a lookup, no FLOPs; wte
// stays in N because it is also the LM head's matrix). 6N counts the matrix
// products (2 forward + 4 backward per weight), 12 L C T the attention score
// and value products without discounting the causal mask.
double gpt_flops_per_token(const GptConfig& cfg);

}  // namespace zt
