#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "io/byte_tokenizer.hpp"

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "héllo, wörld\n";  // UTF-8: several bytes per character
  const auto tokens = zt::encode_bytes(all);
  ASSERT_EQ(tokens.size(), all.size());
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(tokens[i], i);
  for (uint16_t t : tokens) EXPECT_LT(t, zt::kByteVocabSize);
  EXPECT_EQ(zt::decode_bytes(tokens), all);
  EXPECT_TRUE(zt::encode_bytes("").empty());
}

TEST(ByteTokenizer, DecodeRejectsNonBytes) {
  try {
    zt::decode_bytes({65, 66, 256});
    FAIL() << "no UserError";
  } catch (const zt::UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("token 256"), std::string::npos) << msg;
    EXPECT_NE(msg.find("position 2"), std::string::npos) << msg;
  }
}
