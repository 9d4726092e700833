// Test-local helpers for the module tests: a flat, unsharded ParamProvider +
// GradSink, random tensors, and central finite differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "core/rng.hpp"
#include "modules/cpu_kernels.hpp"
#include "modules/gpt.hpp"
#include "modules/runner.hpp"
#include "modules/unit.hpp"
#include "runtime/device.hpp"

namespace zt::test {

// One buffer per parameter and per gradient; no sharding. Counts the calls
// the runner makes so tests can check the seam's protocol.
class FlatStore final : public ParamProvider, public GradSink {
 public:
  FlatStore(Device& dev, const std::vector<const Unit*>& units, DType param_dtype, uint64_t seed)
      : units_(units), pdt_(param_dtype), gdt_(math_dtype(param_dtype)) {
    const size_t n = units.size();
    params_.resize(n);
    grads_.resize(n);
    acquires.assign(3, std::vector<int>(n, 0));
    releases.assign(3, std::vector<int>(n, 0));
    dones.assign(n, 0);
    for (size_t u = 0; u < n; ++u) {
      const auto specs = units[u]->params();
      for (size_t p = 0; p < specs.size(); ++p) {
        const int64_t count = specs[p].shape.numel();
        std::vector<float> init(static_cast<size_t>(count));
        units[u]->init_param(static_cast<int>(p), 0, count, init.data(), seed, static_cast<int>(u));
        params_[u].emplace_back(dev, pdt_, specs[p].shape, MemTag::params);
        convert(init.data(), DType::f32, params_[u].back().data(), pdt_, static_cast<size_t>(count));
        grads_[u].emplace_back(dev, gdt_, specs[p].shape, MemTag::grads);
      }
    }
    zero_grads();
  }

  std::vector<Tensor> acquire(int unit, Phase phase) override {
    ++acquires[static_cast<int>(phase)][static_cast<size_t>(unit)];
    std::vector<Tensor> v;
    for (const Buffer& b : params_[static_cast<size_t>(unit)]) v.push_back(b.tensor());
    for (const TiedParam& t : units_[static_cast<size_t>(unit)]->tied()) v.push_back(param(t.unit, t.param));
    return v;
  }
  void release(int unit, Phase phase) override { ++releases[static_cast<int>(phase)][static_cast<size_t>(unit)]; }
  std::vector<Tensor> grads(int unit) override {
    std::vector<Tensor> v;
    for (const Buffer& b : grads_[static_cast<size_t>(unit)]) v.push_back(b.tensor());
    for (const TiedParam& t : units_[static_cast<size_t>(unit)]->tied()) v.push_back(grad(t.unit, t.param));
    return v;
  }
  void done(int unit) override { ++dones[static_cast<size_t>(unit)]; }

  void zero_grads() {
    for (auto& u : grads_)
      for (Buffer& b : u) std::memset(b.data(), 0, b.bytes());
  }
  Tensor param(int unit, int p) const { return params_[static_cast<size_t>(unit)][static_cast<size_t>(p)].tensor(); }
  Tensor grad(int unit, int p) const { return grads_[static_cast<size_t>(unit)][static_cast<size_t>(p)].tensor(); }
  int num_params(int unit) const { return static_cast<int>(params_[static_cast<size_t>(unit)].size()); }

  std::vector<std::vector<int>> acquires, releases;  // [phase][unit]
  std::vector<int> dones;

 private:
  std::vector<const Unit*> units_;
  DType pdt_, gdt_;
  std::vector<std::vector<Buffer>> params_, grads_;
};

// Deterministic values in [-scale, scale).
inline void fill_uniform(const Tensor& t, uint64_t key, double scale = 1.0) {
  const CounterRng rng{rng_key(key)};
  const int64_t n = t.numel();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * (2.0 * rng.uniform(static_cast<uint64_t>(i)) - 1.0);
  if (t.dtype == DType::f64) {
    std::memcpy(t.data, v.data(), t.bytes());
  } else {
    std::vector<float> f(v.begin(), v.end());
    convert(f.data(), DType::f32, t.data, t.dtype, static_cast<size_t>(n));
  }
}

inline void fill_tokens(const Tensor& t, uint64_t key, int vocab) {
  const CounterRng rng{rng_key(key)};
  int32_t* p = t.as<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(i), static_cast<uint64_t>(vocab)));
}

inline double sum_product(const Tensor& a, const Tensor& w) {  // sum a * w, both f64
  const double* x = a.as<double>();
  const double* y = w.as<double>();
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += x[i] * y[i];
  return s;
}

// Relative error with a floor: gradients below `floor` are compared absolutely
// (central differences of an O(1) objective carry ~1e-11 of rounding noise).
inline double rel_err(double fd, double an, double floor = 1e-3) {
  return std::fabs(fd - an) / std::max({std::fabs(fd), std::fabs(an), floor});
}

// Central differences of f() with respect to x[i] for each i in idx; returns
// the largest relative error against analytic[i].
inline double check_fd(const std::function<double()>& f, double* x, const double* analytic,
                       const std::vector<int64_t>& idx, const char* what, double eps = 1e-5) {
  double worst = 0;
  for (int64_t i : idx) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double fp = f();
    x[i] = keep - eps;
    const double fm = f();
    x[i] = keep;
    const double fd = (fp - fm) / (2 * eps);
    const double e = rel_err(fd, analytic[i]);
    if (e > worst) worst = e;
    if (std::getenv("ZT_TEST_VERBOSE")) std::printf("%s[%ld] fd %.12g an %.12g err %.3g\n", what, static_cast<long>(i), fd, analytic[i], e);
    EXPECT_LT(e, 1e-6) << what << "[" << i << "]: finite difference " << fd << " analytic " << analytic[i];
  }
  return worst;
}

inline std::vector<int64_t> all_indices(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// Up to k distinct indices in [0, n), deterministic.
inline std::vector<int64_t> some_indices(int64_t n, int64_t k, uint64_t key) {
  if (n <= k) return all_indices(n);
  const CounterRng rng{rng_key(key)};
  std::vector<int64_t> v;
  for (uint64_t c = 0; static_cast<int64_t>(v.size()) < k; ++c) {
    const int64_t i = static_cast<int64_t>(rng.below(c, static_cast<uint64_t>(n)));
    if (std::find(v.begin(), v.end(), i) == v.end()) v.push_back(i);
  }
  return v;
}

inline std::vector<const Unit*> views(const std::vector<std::unique_ptr<Unit>>& units) {
  std::vector<const Unit*> v;
  for (const auto& u : units) v.push_back(u.get());
  return v;
}

// Zeroed tensors a test owns, on a CPU device of its own.
struct TensorPool {
  std::unique_ptr<Device> dev = make_cpu_device();
  std::vector<Buffer> owned;
  Tensor make(Shape s, DType t = DType::f64) {
    owned.emplace_back(*dev, t, s, MemTag::activations);
    std::memset(owned.back().data(), 0, owned.back().bytes());
    return owned.back().tensor();
  }
  Tensor rand(Shape s, uint64_t key, double scale = 1.0, DType t = DType::f64) {
    Tensor x = make(s, t);
    fill_uniform(x, key, scale);
    return x;
  }
  Tensor copy(const Tensor& x) {
    Tensor c = make(x.shape, x.dtype);
    std::memcpy(c.data, x.data, x.bytes());
    return c;
  }
  // The (B, T) i32 doc_start ([Note: document masking] in kernels.hpp) of
  // rows made of documents of the given lengths, each row's summing to T.
  Tensor doc_start(const std::vector<std::vector<int64_t>>& lengths, int64_t T) {
    const Tensor d = make(Shape{static_cast<int64_t>(lengths.size()), T}, DType::i32);
    for (size_t b = 0; b < lengths.size(); ++b) {
      int64_t t = 0;
      for (int64_t len : lengths[b])
        for (int64_t i = 0; i < len; ++i, ++t) d.as<int32_t>()[static_cast<int64_t>(b) * T + t] = static_cast<int32_t>(t - i);
      EXPECT_EQ(t, T) << "row " << b << "'s documents do not fill T";
    }
    return d;
  }
};

// The kernel tests' fixture: CpuKernels, a workspace arena, owned tensors.
struct KernelFixture : ::testing::Test, TensorPool {
  Arena ws{*dev, MemTag::workspace, 1 << 16};
  CpuKernels k;
};

// Finite differences through UnitRunner over a FlatStore: the objective
// sum(R * output) of units [first, last), its analytic gradients, and the
// check of every parameter of a unit.
struct RunnerFd {
  const std::vector<const Unit*>& uv;
  FlatStore& store;
  UnitRunner& runner;
  MicroBatchState& mb;
  TensorPool& pool;
  // Objective: sum(R * output of unit last-1) after a forward of [first, last).
  double objective(int first, int last, const Tensor& in, const Tensor& targets, const Tensor& R) {
    mb.reset();
    const Tensor out = runner.forward(first, last, mb, store, in, targets);
    return sum_product(out, R);
  }
  // Analytic gradients: fresh grads, forward, backward with dout = R.
  Tensor analytic(int first, int last, const Tensor& in, const Tensor& targets, const Tensor& R) {
    store.zero_grads();
    mb.reset();
    runner.forward(first, last, mb, store, in, targets);
    // Unit first's input gradient goes into a buffer of the pool (the
    // runner requires one when first > 0; unit 0 has no input gradient).
    const Tensor din_out = first > 0 ? pool.make(runner.unit(first).input_shape(mb.B, mb.T),
                                                 math_dtype(runner.act_dtype()))
                                     : Tensor();
    return runner.backward(first, last, mb, store, store, R, din_out);
  }
  void check_unit_params(int unit, const std::function<double()>& f, int64_t per_param, uint64_t key) {
    for (int p = 0; p < store.num_params(unit); ++p) {
      const Tensor w = store.param(unit, p);
      const std::string what =
          uv[static_cast<size_t>(unit)]->name() + "." + uv[static_cast<size_t>(unit)]->params()[static_cast<size_t>(p)].name;
      check_fd(f, w.as<double>(), store.grad(unit, p).as<double>(),
               some_indices(w.numel(), per_param, key + static_cast<uint64_t>(p)), what.c_str());
    }
  }
};

}  // namespace zt::test
