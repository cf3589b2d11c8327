// append_decimal(): what std::to_string wrote, appended in place, at every width and sign.
#include "idempotency/detail/decimal.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace idempotency::detail {
namespace {

template <class Int>
void expect_as_to_string(Int n) {
  std::string out = "x:";
  append_decimal(out, n);
  EXPECT_EQ(out, "x:" + std::to_string(n));
}

TEST(Decimal, AppendsWhatToStringWritesAtEveryWidthAndSign) {
  expect_as_to_string(0);
  expect_as_to_string(std::numeric_limits<std::int64_t>::min());  // the widest text: 20 chars
  expect_as_to_string(std::numeric_limits<std::int64_t>::max());
  expect_as_to_string(std::numeric_limits<std::uint64_t>::max());
  expect_as_to_string(std::numeric_limits<int>::min());
  for (std::int64_t n = 1; n > 0 && n < std::numeric_limits<std::int64_t>::max() / 10; n *= 10) {
    expect_as_to_string(n - 1);
    expect_as_to_string(n);
    expect_as_to_string(-n);
  }
}

}  // namespace
}  // namespace idempotency::detail
