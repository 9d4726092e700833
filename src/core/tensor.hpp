// Shape and the non-owning Tensor view: (pointer, dtype, shape, device).
// Buffers are owned by whoever allocated them through a runtime::Device.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace zt {

class Shape {
 public:
  static constexpr int kMaxRank = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    ZT_CHECK(static_cast<int>(dims.size()) <= kMaxRank, "shape rank > ", kMaxRank);
    for (int64_t d : dims) dims_[rank_++] = d;
  }
  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i < 0 ? rank_ + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

enum class DeviceKind : uint8_t { cpu, cuda };

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  DeviceKind device = DeviceKind::cpu;

  Tensor() = default;
  Tensor(void* d, DType t, Shape s, DeviceKind dev = DeviceKind::cpu)
      : data(d), dtype(t), shape(s), device(dev) {}

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool defined() const { return data != nullptr; }

  template <typename T>
  T* as() const {
    ZT_CHECK(dtype_of<T>::value == dtype, "tensor is ", dtype_name(dtype), ", accessed as ",
             dtype_name(dtype_of<T>::value));
    return static_cast<T*>(data);
  }
  // A view of the same memory with another shape (same element count).
  Tensor reshape(Shape s) const {
    ZT_CHECK(s.numel() == numel(), "reshape ", shape.str(), " -> ", s.str());
    return Tensor(data, dtype, s, device);
  }
  // Elements [offset, offset + n) as a 1-D view.
  Tensor slice1d(int64_t offset, int64_t n) const {
    ZT_CHECK(offset >= 0 && offset + n <= numel(), "slice out of range");
    return Tensor(static_cast<char*>(data) + offset * dtype_size(dtype), dtype, Shape{n}, device);
  }
};

}  // namespace zt
