// GPT-2 as three kinds of units: EmbeddingUnit (wte, wpe), BlockUnit
// (pre-LayerNorm attention + MLP) and HeadUnit (ln_f and the LM head tied to
// wte, fused with the cross-entropy loss). Unit order in a model: 0 =
// embedding, 1..n_layer = blocks, n_layer + 1 = head.
//
// Each unit class's static describe() is the one list of its tensors
// (model_desc.hpp): names within the unit as GPT-2's state dict has them
// (wte.weight; ln_1.weight, attn.c_attn.weight, ...; ln_f.weight), the
// Hugging Face names (h.<i>.attn.c_attn.weight, ...), and what its forward
// keeps for backward. Linear weights are stored (out, in) like
// torch.nn.Linear; HF's Conv1D stores the transpose, so c_attn, c_proj and
// c_fc are described as transposed there.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "modules/model_desc.hpp"
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

// The shape of a GPT-2 of these sizes (F = 4C, n_kv_head = n_head).
ModelShape gpt2_shape(const GptConfig& cfg, std::string name = "gpt2");
// Embedding, n_layer blocks and head, each unit's describe(); flops per token
// as gpt_flops_per_token says.
ModelDesc describe_gpt2(const ModelShape& s);
// The units of a GPT-2 description, in its order, each holding its unit's
// description.
std::vector<std::unique_ptr<Unit>> gpt2_units(const ModelDesc& desc);

class EmbeddingUnit final : public DescribedUnit {
 public:
  static UnitDesc describe(const ModelShape& s);  // wte.weight (V, C), wpe.weight (T_max, C)
  EmbeddingUnit(const ModelShape& s, UnitDesc desc);
  void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                  int unit_index) const override;
  void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
               const Tensor& out, Stash& stash) const override;
  void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                const Tensor& din, Stash& stash) const override;

 private:
  int64_t C_, T_max_;
};

class BlockUnit final : public DescribedUnit {
 public:
  static UnitDesc describe(const ModelShape& s, int layer);  // "h.<layer>": ln_1, attn, ln_2, mlp
  BlockUnit(const ModelShape& s, UnitDesc desc);
  void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                  int unit_index) const override;
  void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
               const Tensor& out, Stash& stash) const override;
  void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                const Tensor& din, Stash& stash) const override;

 private:
  int64_t C_;
  int n_head_, n_layer_;
};

class HeadUnit final : public DescribedUnit {
 public:
  // ln_f.weight, ln_f.bias; the LM head is the embedding's wte (unit 0, param 0).
  static UnitDesc describe(const ModelShape& s);
  HeadUnit(const ModelShape& s, UnitDesc desc);
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
  int64_t C_;
};

// The units of a GPT-2 of these sizes (cfg validated first): embedding,
// n_layer blocks, head.
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
