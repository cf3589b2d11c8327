// HeaderScan, the server's first look at a request's header bytes: where the header ends, and
// the line endings and folds it refuses, however the bytes are split across reads.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "request_guard.h"

namespace idempotency::http::detail {
namespace {

using Verdict = HeaderScan::Verdict;

// The verdict for `bytes` arriving one byte at a time into a growing buffer, as a connection
// scans them: the first verdict that is not kNeedMore, with how many bytes had arrived.
std::pair<Verdict, std::size_t> byte_by_byte(std::string_view bytes) {
  HeaderScan scan;
  for (std::size_t n = 1; n <= bytes.size(); ++n) {
    const auto verdict = scan.scan(bytes.substr(0, n));
    if (verdict != Verdict::kNeedMore) return {verdict, n};
  }
  return {Verdict::kNeedMore, bytes.size()};
}

Verdict at_once(std::string_view bytes) { return HeaderScan().scan(bytes); }

TEST(HeaderScan, FindsTheEndOfTheHeaderHoweverItArrives) {
  const std::string header =
      "POST /push HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nContent-Length: 4\r\n\r\n";
  const std::string request = header + "a\nb\r";  // the body's bytes are not the header's

  EXPECT_EQ(byte_by_byte(request), std::make_pair(Verdict::kComplete, header.size()));
  HeaderScan whole;
  EXPECT_EQ(whole.scan(request), Verdict::kComplete);
  EXPECT_EQ(whole.header_size(), header.size());
  EXPECT_EQ(at_once(header.substr(0, header.size() - 1)), Verdict::kNeedMore);
  // Two reads split at every place: the end is found in the second, and sized from the start.
  for (std::size_t split = 1; split < header.size(); ++split) {
    HeaderScan scan;
    EXPECT_EQ(scan.scan(std::string_view(request).substr(0, split)), Verdict::kNeedMore) << split;
    EXPECT_EQ(scan.scan(request), Verdict::kComplete) << split;
    EXPECT_EQ(scan.header_size(), header.size()) << split;
  }
}

TEST(HeaderScan, AHeaderOverTheLimitIsTooLargeWhetherWholeOrStillArriving) {
  const std::string header = "POST /push HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n";
  const std::string request = header + "{}";  // the body does not count
  EXPECT_EQ(HeaderScan().scan(request, header.size()), Verdict::kComplete);
  EXPECT_EQ(HeaderScan().scan(request, header.size() - 1), Verdict::kTooLarge);
  const std::string_view part = std::string_view(header).substr(0, 20);
  EXPECT_EQ(HeaderScan().scan(part, 20), Verdict::kNeedMore);
  EXPECT_EQ(HeaderScan().scan(part, 19), Verdict::kTooLarge);
}

TEST(HeaderScan, RefusesABareCrOrLfAndObsFoldWhereverTheyAre) {
  const struct {
    std::string bytes;
    Verdict verdict;
  } cases[] = {
      // A bare CR inside a value: some parsers end the line there (a forged field).
      {"POST / HTTP/1.1\r\nX-A: a\rX-Idempotency-Fence: 9\r\n\r\n", Verdict::kBareLineEnding},
      {"POST / HTTP/1.1\r\nX-A: a\r\r\n\r\n", Verdict::kBareLineEnding},
      // Bare LF line endings, first line or later, and an LF inside a value.
      {"POST / HTTP/1.1\nHost: a\n\n", Verdict::kBareLineEnding},
      {"POST / HTTP/1.1\r\nHost: a\n\r\n", Verdict::kBareLineEnding},
      {"POST / HTTP/1.1\r\nX-A: a\nb\r\n\r\n", Verdict::kBareLineEnding},
      {"\nPOST / HTTP/1.1\r\n\r\n", Verdict::kBareLineEnding},
      // An empty line that is not CRLF.
      {"POST / HTTP/1.1\r\nHost: a\r\n\rX", Verdict::kBareLineEnding},
      // obs-fold: a line that starts with SP or HTAB.
      {"POST / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", Verdict::kObsFold},
      {"POST / HTTP/1.1\r\nX-A: a\r\n\tb\r\n\r\n", Verdict::kObsFold},
      // Two problems: the first by position is the verdict.
      {"GET / HTTP/1.1\r\nA: b\nC: d\r\n e\r\n\r\n", Verdict::kBareLineEnding},
      {"GET / HTTP/1.1\r\nA: b\r\n c\nD: e\r\n\r\n", Verdict::kObsFold},
      {"GET / HTTP/1.1\r\nA: b\nC: d\rE: f\r\n\r\n", Verdict::kBareLineEnding},
      {"GET / HTTP/1.1\r\nA: b\rC: d\nE: f\r\n\r\n", Verdict::kBareLineEnding},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(at_once(c.bytes), c.verdict) << c.bytes;
    EXPECT_EQ(byte_by_byte(c.bytes).first, c.verdict) << c.bytes;
  }
}

TEST(HeaderScan, StartsAfreshAfterReset) {
  HeaderScan scan;
  EXPECT_EQ(scan.scan("GET / HTTP/1.1\r\nHost: a\r\n"), Verdict::kNeedMore);
  scan.reset();
  EXPECT_EQ(scan.scan("GET"), Verdict::kNeedMore);
  EXPECT_EQ(scan.scan("GET / HTTP/1.1\r\n\r\n"), Verdict::kComplete);
}

// HeaderScan as it was written before it looked at 16 bytes at a time: a memchr for each CR,
// then one for each LF before the CR's verdict. The differential test below holds the two to
// the same verdicts, header sizes and resume points.
class ReferenceScan {
 public:
  Verdict scan(std::string_view buffer, std::size_t limit) {
    const std::size_t from = scanned_ >= 3 ? scanned_ - 3 : 0;
    const char* const data = buffer.data();
    const std::size_t size = buffer.size();
    std::size_t end = size;
    Verdict verdict = Verdict::kNeedMore;
    for (std::size_t at = from;;) {
      const auto* cr = static_cast<const char*>(std::memchr(data + at, '\r', size - at));
      if (cr == nullptr) break;
      const auto i = static_cast<std::size_t>(cr - data);
      if (i + 1 >= size ||
          (data[i + 1] == '\n' && (i + 2 >= size || (data[i + 2] == '\r' && i + 3 >= size)))) {
        end = i;
        break;
      }
      if (data[i + 1] != '\n') {
        verdict = Verdict::kBareLineEnding;
      } else if (const char next = data[i + 2]; next == '\r') {
        verdict = data[i + 3] == '\n' ? Verdict::kComplete : Verdict::kBareLineEnding;
      } else if (next == ' ' || next == '\t') {
        verdict = Verdict::kObsFold;
      }
      if (verdict != Verdict::kNeedMore) {
        end = i;
        break;
      }
      at = i + 2;
    }
    for (std::size_t i = from; i < end; ++i) {
      if (data[i] == '\n' && (i == 0 || data[i - 1] != '\r')) return Verdict::kBareLineEnding;
    }
    if (verdict == Verdict::kNeedMore) {
      scanned_ = end;
      return size > limit ? Verdict::kTooLarge : verdict;
    }
    if (verdict == Verdict::kComplete) {
      header_size_ = end + 4;
      if (header_size_ > limit) return Verdict::kTooLarge;
    }
    return verdict;
  }
  [[nodiscard]] std::size_t header_size() const { return header_size_; }

 private:
  std::size_t scanned_ = 0;
  std::size_t header_size_ = 0;
};

// Random headers of line-ending bytes, blanks and text, long enough to be read 16 bytes at a
// time and then byte by byte, arriving in random reads with random limits: every scan answers
// as the reference does, and a complete header has the reference's size.
TEST(HeaderScan, AnswersAsTheMemchrScanDid) {
  std::mt19937 random(20261207);
  constexpr std::string_view kBytes = "\r\n\r\n \tab:";
  for (int round = 0; round < 20'000; ++round) {
    std::string bytes(std::uniform_int_distribution<std::size_t>(0, 80)(random), 'x');
    // Mostly well-formed lines, so verdicts are reached at every depth.
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      const auto pick = std::uniform_int_distribution<std::size_t>(0, 30)(random);
      if (pick < kBytes.size()) {
        bytes[i] = kBytes[pick];
      } else if (pick < 14 && i + 1 < bytes.size()) {
        bytes[i] = '\r';
        bytes[++i] = '\n';
      }
    }
    const std::size_t limit = std::uniform_int_distribution<std::size_t>(0, 90)(random);
    HeaderScan scan;
    ReferenceScan reference;
    for (std::size_t size = 0; size <= bytes.size();) {
      const std::string_view part = std::string_view(bytes).substr(0, size);
      const Verdict verdict = scan.scan(part, limit);
      ASSERT_EQ(verdict, reference.scan(part, limit))
          << ::testing::PrintToString(bytes) << " " << size;
      if (verdict == Verdict::kComplete) {
        ASSERT_EQ(scan.header_size(), reference.header_size()) << ::testing::PrintToString(bytes);
      }
      if (verdict != Verdict::kNeedMore) break;
      if (size == bytes.size()) break;
      size += std::uniform_int_distribution<std::size_t>(1, 24)(random);
      size = std::min(size, bytes.size());
    }
  }
}

}  // namespace
}  // namespace idempotency::http::detail
