// Model: an ordered list of units, the only view of a network that the layers
// above modules/ (zero, pipeline, train) use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "modules/gpt.hpp"
#include "modules/unit.hpp"

namespace zt {

class Model {
 public:
  Model(std::string name, std::vector<std::unique_ptr<Unit>> units, double flops_per_token);
  const std::string& name() const { return name_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  const Unit& unit(int i) const { return *units_.at(static_cast<size_t>(i)); }
  // Non-owning pointers, valid for the model's lifetime (what UnitRunner takes).
  const std::vector<const Unit*>& units() const { return views_; }
  int64_t num_params() const { return count_params(views_); }
  // Training FLOPs (forward + backward) per token, for MFU.
  double flops_per_token() const { return flops_per_token_; }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<const Unit*> views_;
  double flops_per_token_;
};

Model make_gpt_model(const GptConfig& cfg);

}  // namespace zt
