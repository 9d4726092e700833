// Model: the units of a model description, built to run. The layers above
// modules/ (zero, pipeline, train) see a network only as its description
// (model_desc.hpp) and this ordered list of units.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "modules/model_desc.hpp"
#include "modules/unit.hpp"

namespace zt {

class Model {
 public:
  const ModelDesc& desc() const { return desc_; }
  const std::string& arch() const { return desc_.arch(); }
  int num_units() const { return static_cast<int>(units_.size()); }
  const Unit& unit(int i) const { return *units_.at(static_cast<size_t>(i)); }
  // Non-owning pointers, valid for the model's lifetime (what UnitRunner takes).
  const std::vector<const Unit*>& units() const { return views_; }
  int64_t num_params() const { return desc_.num_params(); }
  // Training FLOPs (forward + backward) per token, for MFU.
  double flops_per_token() const { return desc_.flops_per_token; }

 private:
  friend Model build_model(const ModelDesc& desc);
  Model(ModelDesc desc, std::vector<std::unique_ptr<Unit>> units);

  ModelDesc desc_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<const Unit*> views_;
};

// The units of `desc`, each made from its unit description (gpt2, llama).
Model build_model(const ModelDesc& desc);

}  // namespace zt
