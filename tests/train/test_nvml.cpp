// NVML loaded at run time (train/nvml.hpp): a library that is not there and
// one without NVML's symbols are reported with the reason; the tests' fake
// NVML (fake_nvml.c) is found by bus id and sampled in ztrain's units.
#include <gtest/gtest.h>

#include <cmath>

#include "train/nvml.hpp"

namespace zt {
namespace {

TEST(Nvml, AbsentLibraryGivesTheReason) {
  std::string why;
  EXPECT_EQ(Nvml::open("/nonexistent/libnvidia-ml.so.1", why), nullptr);
  EXPECT_NE(why.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << why;
}

TEST(Nvml, LibraryWithoutNvmlNamesTheMissingSymbol) {
  std::string why;
  EXPECT_EQ(Nvml::open("libm.so.6", why), nullptr);
  EXPECT_EQ(why, "libm.so.6 has no nvmlInit_v2");
}

TEST(Nvml, FakeNvmlIsSampledInBytesWattsAndFractions) {
  std::string why;
  std::unique_ptr<Nvml> n = Nvml::open(ZT_FAKE_NVML, why);
  ASSERT_NE(n, nullptr) << why;
  EXPECT_FALSE(n->sample().has_value());  // nothing selected yet
  EXPECT_FALSE(n->select("missing", why));
  EXPECT_NE(why.find("PCI bus id missing"), std::string::npos) << why;
  ASSERT_TRUE(n->select("0000:3b:00.0", why)) << why;
  const std::optional<GpuSample> s = n->sample();
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(s->utilization, 0.37);
  EXPECT_DOUBLE_EQ(s->memory_used, 3.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(s->memory_total, 80.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(s->power_w, 250.0);
}

}  // namespace
}  // namespace zt
