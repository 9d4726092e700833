#include "core/tensor.hpp"

#include <sstream>

namespace zt {

std::string Shape::str() const {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < rank_; ++i) os << (i ? ", " : "") << dims_[i];
  os << ")";
  return os.str();
}

}  // namespace zt
