// The model description: a network as data, the one place its units and
// tensors are listed. The trainer builds the model from it (build_model,
// model.hpp), zckpt names and maps checkpoint tensors by it (Hugging Face
// names and layouts), the pipeline partitions its units, and the memory
// estimator counts its bytes (src/zero/estimator.hpp).
//
// An architecture's units list their own tensors and activation facts in a
// static describe function (GPT-2: EmbeddingUnit::describe, ... in gpt.hpp),
// next to the forward that allocates what they describe; a unit built from a
// description returns that description's tensors (DescribedUnit). Llama is
// described in llama_desc.hpp and built from that description (llama.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "modules/rope.hpp"
#include "modules/unit.hpp"

namespace zt {

// A decoder-only transformer's sizes. The architecture fixes the rest: GPT-2
// has LayerNorm, biases, learned positions (seq_len rows), F = 4C and an LM
// head tied to wte; Llama has RMSNorm, no biases, rotary positions, SwiGLU
// and an untied head.
struct ModelShape {
  std::string arch;        // "gpt2" | "llama"
  std::string name;        // for reports: "gpt2-124m", "gpt2 (custom sizes)", "llama2-70b"
  int64_t n_layer = 0;
  int64_t d_model = 0;     // C
  int64_t n_head = 0;
  int64_t n_kv_head = 0;   // grouped-query attention; = n_head for multi-head
  int64_t ffn_hidden = 0;  // F: MLP width
  int64_t vocab = 0;       // V
  int64_t seq_len = 0;     // T: training sequence (and rows of wpe when learned)
  // Llama only (GPT-2 keeps the defaults and ignores them): RMSNorm's eps,
  // the rotary embedding (rope.head_dim = head_dim()), and whether lm_head
  // is the embedding table itself.
  double rms_norm_eps = 1e-5;
  RopeConfig rope;
  bool tie_word_embeddings = false;

  int64_t head_dim() const { return d_model / n_head; }
  int64_t kv_width() const { return n_kv_head * head_dim(); }  // width of k and of v
  int64_t qkv_width() const { return d_model + 2 * kv_width(); }
  void validate() const;  // throws UserError naming the shape and the bad field
};

// Activation bytes per token of one micro-batch: values in the activation
// (storage) dtype and values in the math dtype (fp32 in training).
struct TokenBytes {
  int64_t act = 0;
  int64_t f32 = 0;
  int64_t bytes(int64_t act_size) const { return act * act_size + f32 * 4; }
};
TokenBytes operator+(const TokenBytes& a, const TokenBytes& b);

// How a tensor is laid out in a Hugging Face state dict relative to ztrain's
// (which keeps linear weights (out, in), like torch.nn.Linear). A rotary q/k
// permutation joins here when an architecture needs one.
enum class HfLayout : uint8_t {
  as_is,
  transposed,  // a 2-D weight stored (in, out): GPT-2's Conv1D
};

struct TensorDesc {
  std::string name;        // within its unit, stored in checkpoints: "attn.c_attn.weight"
  Shape shape;             // ztrain's layout
  bool weight_decay;       // AdamW decay applies (2-D weights)
  std::string hf_name;     // Hugging Face state-dict name: "h.3.attn.c_attn.weight"
  HfLayout hf_layout = HfLayout::as_is;
  // [Note: gradients written, not zeroed] (zero/zero_engine.hpp): the unit's
  // backward writes this tensor's whole gradient in one product, so at its
  // first backward of a step it overwrites instead of adding.
  bool grad_overwritten = false;
  Shape hf_shape() const;  // the shape as Hugging Face stores it
};

enum class UnitKind : uint8_t { embedding, block, head };
const char* unit_kind_name(UnitKind kind);

// What a unit's forward keeps for its backward and what its backward needs
// as temporaries ([Note: micro-batch memory] in runner.hpp): the runner keeps
// every unit's output until the unit's backward (it is the next unit's
// input); the stash is dropped under activation checkpointing when the unit
// is checkpointable, and then recomputed into scratch before its backward.
struct UnitActivations {
  TokenBytes output;
  TokenBytes stash;
  TokenBytes backward;       // scratch of the backward, released at its end
  int64_t logits_width = 0;  // head: V, the fp32 row of the fused classifier's logits chunks
  // The part of the stash that products write in their epilogues (GPT-2's
  // kept GELU output) rather than a memory-bound pass of its own: zplan's
  // time model leaves it out of the memory-bound work ([Note: plan time
  // model] in apps/zplan_model.cpp).
  TokenBytes stash_from_products;
};

struct UnitDesc {
  std::string name;  // "embedding", "h.<i>", "head" (stored in checkpoints)
  UnitKind kind = UnitKind::block;
  std::vector<TensorDesc> tensors;  // own tensors, in the order of the unit's flat buffer
  std::vector<TiedParam> tied;      // tensors of other units it also reads (tied LM head)
  bool checkpointable = false;      // activation checkpointing may drop its stash
  UnitActivations act;

  int64_t numel() const;  // own tensors' elements
  std::vector<ParamSpec> params() const;
};

struct ModelDesc {
  ModelShape shape;
  std::vector<UnitDesc> units;  // embedding, blocks 0..n_layer-1, head
  double flops_per_token = 0;   // training FLOPs (forward + backward) per token, for MFU

  const std::string& arch() const { return shape.arch; }
  int num_units() const { return static_cast<int>(units.size()); }
  int64_t num_params() const;  // own tensors: a tied one counts once
  // The partitioner's inputs (pipeline/partition.hpp): elements of each
  // unit, and the units each unit ties to.
  std::vector<int64_t> unit_numels() const;
  std::vector<std::vector<int>> unit_ties() const;
};

// [Note: partial recomputation] Which units recompute their forward in
// backward. With activation checkpointing on, the first `layers`
// checkpointable units of each chunk (a contiguous run of units that one
// runner call walks: a pipeline stage's model chunk, or the whole model)
// drop their stash and recompute it; the others keep it, as Megatron-LM's
// recompute_method "block" with recompute_num_layers. layers < 0: every
// checkpointable unit; checkpointing off: none. `checkpointable[u]` per
// unit of the whole model; the result likewise (false outside the chunks).
std::vector<bool> recomputed_units(const std::vector<bool>& checkpointable,
                                   const std::vector<std::vector<int>>& chunks, bool checkpointing, int layers);
// "off", "on", or "on for the first N blocks of each chunk", for logs and tables.
std::string recompute_description(bool checkpointing, int layers);

// The model of a config: the architecture model.arch with the config's sizes.
// UserError for an architecture that is not known.
ModelDesc describe_model(const ModelConfig& cfg);

// A unit made from its description: name, parameters, ties and
// checkpointability are the description's, and its input and output follow
// from its kind and the model's width C:
//   embedding  token ids (B, T) i32          -> activations (B, T, C)
//   block      activations (B, T, C)         -> activations (B, T, C)
//   head       activations (B, T, C)         -> per-token loss (B, T) in math_dtype
class DescribedUnit : public Unit {
 public:
  DescribedUnit(const ModelShape& s, UnitDesc desc) : desc_(std::move(desc)), width_(s.d_model) {}
  const UnitDesc& desc() const { return desc_; }
  std::string name() const override { return desc_.name; }
  std::vector<ParamSpec> params() const override { return desc_.params(); }
  std::vector<TiedParam> tied() const override { return desc_.tied; }
  bool checkpointable() const override { return desc_.checkpointable; }
  Shape input_shape(int64_t B, int64_t T) const override {
    return desc_.kind == UnitKind::embedding ? Shape{B, T} : Shape{B, T, width_};
  }
  DType input_dtype(DType act) const override { return desc_.kind == UnitKind::embedding ? DType::i32 : act; }
  Shape output_shape(int64_t B, int64_t T) const override {
    return desc_.kind == UnitKind::head ? Shape{B, T} : Shape{B, T, width_};
  }
  DType output_dtype(DType act) const override { return desc_.kind == UnitKind::head ? math_dtype(act) : act; }

 private:
  UnitDesc desc_;
  int64_t width_;
};

}  // namespace zt
