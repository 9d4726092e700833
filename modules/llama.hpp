// Llama as three kinds of units built from its description (llama_desc.hpp):
// LlamaEmbeddingUnit (embed_tokens; positions are rotary, so there is no
// position table), LlamaBlockUnit (pre-RMSNorm grouped-query attention with
// rotary q and k, and a SwiGLU MLP; no biases) and LlamaHeadUnit (final
// RMSNorm and lm_head, fused with the cross-entropy loss; lm_head is the
// head's own, or the embedding's table under tie_word_embeddings). Unit
// order as GPT-2's: 0 = embedding, 1..n_layer = blocks, n_layer + 1 = head.
#pragma once

#include <memory>
#include <vector>

#include "modules/model_desc.hpp"
#include "modules/unit.hpp"

namespace zt {

// The units of a Llama description, in its order.
std::vector<std::unique_ptr<Unit>> llama_units(const ModelDesc& desc);

class LlamaEmbeddingUnit final : public DescribedUnit {
 public:
  LlamaEmbeddingUnit(const ModelShape& s, UnitDesc desc);
  void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                  int unit_index) const override;
  void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
               const Tensor& out, Stash& stash) const override;
  void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                const Tensor& din, Stash& stash) const override;

 private:
  int64_t C_;
};

class LlamaBlockUnit final : public DescribedUnit {
 public:
  LlamaBlockUnit(const ModelShape& s, UnitDesc desc);
  bool writes_din_operand() const override { return true; }
  void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                  int unit_index) const override;
  void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
               const Tensor& out, Stash& stash) const override;
  void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                const Tensor& din, Stash& stash) const override;

 private:
  int64_t C_, KV_, F_;
  int n_head_, n_kv_head_;
  double eps_;
  RopeConfig rope_;
};

class LlamaHeadUnit final : public DescribedUnit {
 public:
  LlamaHeadUnit(const ModelShape& s, UnitDesc desc);
  bool writes_din_operand() const override { return true; }
  void init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                  int unit_index) const override;
  void forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
               const Tensor& out, Stash& stash) const override;
  void backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                const Tensor& din, Stash& stash) const override;

 private:
  int64_t C_;
  double eps_;
};

}  // namespace zt
