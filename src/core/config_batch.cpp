// The batch triplet: train_batch_size = train_micro_batch_size_per_gpu *
// gradient_accumulation_steps * data-parallel size, with DeepSpeed's rules for
// deriving the members that are absent or "auto".
#include "core/config_reader.hpp"
#include "core/error.hpp"

namespace zt::config_detail {

void parse_batch_triplet(const SectionReader& top, Config& cfg) {
  BatchConfig& b = cfg.batch;
  b = BatchConfig{};
  auto read = [&](const char* key, int64_t& value, bool& is_auto) {
    value = 0;
    is_auto = true;
    const json* v = top.find(key);
    if (!v) return;
    if (v->is_string() && to_lower(v->get<std::string>()) == "auto") return;
    if (!v->is_number()) top.fail(key, "expected a positive integer or \"auto\", found " + show(*v));
    // Below 2^31 each; resolve_batch multiplies in 128 bits.
    value = top.integer(key, 0, 1, kIntMax);
    is_auto = false;
  };
  read("train_batch_size", b.train_batch_size, b.train_auto);
  read("train_micro_batch_size_per_gpu", b.micro_batch, b.micro_auto);
  read("gradient_accumulation_steps", b.grad_accum, b.accum_auto);
}

}  // namespace zt::config_detail

namespace zt {

namespace {

std::string term(const char* name, int64_t v) { return std::string(name) + " (" + std::to_string(v) + ")"; }

// "24 or 32": the multiples of `step` nearest to `value`.
std::string nearest_multiples(int64_t value, int64_t step) {
  const int64_t below = value / step * step;
  const int64_t above = below + step;
  if (below == 0) return std::to_string(above);
  return std::to_string(below) + " or " + std::to_string(above);
}

// micro * accum * dp in 128 bits: each factor is below 2^31, the product may not be.
int64_t product(const std::string& source, int64_t x, int64_t y, int64_t z = 1) {
  const __int128 p = static_cast<__int128>(x) * y * z;
  if (p > static_cast<__int128>(config_detail::kInt64Max))
    throw UserError(source + "train_batch_size: the batch sizes multiply to more than 2^63");
  return static_cast<int64_t>(p);
}

}  // namespace

void resolve_batch(Config& cfg, int dp_size) {
  ZT_CHECK(dp_size >= 1, "data-parallel size must be >= 1, got ", dp_size);
  BatchConfig& b = cfg.batch;
  const std::string source = (cfg.source.empty() ? std::string("<config>") : cfg.source) + ": ";
  // Start from what the config gave, so that resolving again (another DP size
  // after a reshard) does not treat earlier derived values as given.
  // 0 = not given; given values are >= 1 (parse_batch_triplet checks).
  const int64_t train = b.train_auto ? 0 : b.train_batch_size;
  const int64_t micro = b.micro_auto ? 0 : b.micro_batch;
  const int64_t accum = b.accum_auto ? 0 : b.grad_accum;
  const int64_t dp = dp_size;
  const std::string dp_term = term("data-parallel size", dp);

  // Derives micro or accum from train and the other; fails with the arithmetic
  // and the nearest train_batch_size that divides.
  auto divide = [&](int64_t t, const std::string& divisor_text, int64_t divisor, const char* derived) {
    if (t % divisor == 0) return t / divisor;
    throw UserError(source + "train_batch_size: " + term("train_batch_size", t) + " is not divisible by " +
                    divisor_text + " = " + std::to_string(divisor) + ", so " + derived +
                    " cannot be derived; nearest valid train_batch_size: " + nearest_multiples(t, divisor));
  };

  int64_t t = 0, m = 0, a = 0;
  if (train && micro && accum) {
    t = train, m = micro, a = accum;
    const int64_t expected = product(source, m, a, dp);
    if (t != expected)
      throw UserError(source + "train_batch_size: inconsistent batch sizes: " + term("train_batch_size", t) +
                      " != " + term("train_micro_batch_size_per_gpu", m) + " * " +
                      term("gradient_accumulation_steps", a) + " * " + dp_term + " = " + std::to_string(expected) +
                      " (give at most two of them, or values that agree)");
  } else if (train && micro) {
    t = train, m = micro;
    a = divide(t, term("train_micro_batch_size_per_gpu", m) + " * " + dp_term, product(source, m, dp),
               "gradient_accumulation_steps");
  } else if (train && accum) {
    t = train, a = accum;
    m = divide(t, term("gradient_accumulation_steps", a) + " * " + dp_term, product(source, a, dp),
               "train_micro_batch_size_per_gpu");
  } else if (micro && accum) {
    m = micro, a = accum, t = product(source, m, a, dp);
  } else if (train) {
    t = train, a = 1;
    m = divide(t, dp_term, dp, "train_micro_batch_size_per_gpu");
  } else {
    // Only micro, only accum, or nothing: the micro-batch defaults, one
    // micro-batch per step unless accumulation is given.
    m = micro ? micro : kDefaultMicroBatch;
    a = accum ? accum : 1;
    t = product(source, m, a, dp);
  }
  b.train_batch_size = t;
  b.micro_batch = m;
  b.grad_accum = a;
}

}  // namespace zt
