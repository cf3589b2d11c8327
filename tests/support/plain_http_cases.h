// Cases for the tests that hold the fast readers of plain HTTP (the server's simple_request,
// the upstream client's simple_response) to Beast's parser: random edits of a message, and the
// field lines both must decline, since both read fields with read_plain_fields().
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace idempotency::testing {

/// mutate_http() makes one to three edits of `bytes`: a byte replaced by one that matters to
/// HTTP's syntax (CR, LF, SP, HTAB, separators, digits, letters of special field names, DEL,
/// obs-text, NUL), a byte removed, or a run of up to eight bytes doubled.
inline std::string mutate_http(std::string bytes, std::mt19937& rng) {
  // The array's own terminating NUL is one of them.
  static constexpr char kBytes[] = "\r\n \t:,;/?0129aZuUpPeE-\x7f\x80\xff\"(";
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    const std::size_t at = rng() % bytes.size();
    switch (rng() % 4) {
      case 0:
      case 1:
        bytes[at] = kBytes[rng() % sizeof kBytes];
        break;
      case 2:
        bytes.erase(at, 1);
        break;
      default:
        bytes.insert(at, bytes.substr(at, 1 + rng() % 8));
        break;
    }
  }
  return bytes;
}

/// expect_agreement_under_mutation() feeds `count` mutations of the seeds, in turn, to
/// `accepts(bytes)`, which says whether the fast reader accepted them and checks its reading
/// against Beast's with gtest's EXPECTs; it stops at the first failed check. Mutations that
/// keep the message plain must be common (a twentieth at least), or the test checks nothing.
template <class Accepts>
void expect_agreement_under_mutation(const std::vector<std::string>& seeds, std::uint32_t seed,
                                     int count, Accepts accepts) {
  std::mt19937 rng(seed);
  int accepted = 0;
  for (int i = 0; i < count && !::testing::Test::HasFailure(); ++i) {
    if (accepts(mutate_http(seeds[static_cast<std::size_t>(i) % seeds.size()], rng))) ++accepted;
  }
  EXPECT_GT(accepted, count / 20) << accepted << " of " << count;
}

/// declined_fields() returns messages that start with `start` (a request or status line and
/// its CRLF) and hold a field a plain reader must leave to Beast's parser: each odd field line
/// followed by `rest` (the plain rest of a header and its body), and the framing fields it does
/// not read itself.
inline std::vector<std::string> declined_fields(const std::string& start, const std::string& rest) {
  std::vector<std::string> cases = {
      start + "Content-Length: 2\r\nContent-Length: 2\r\n\r\nhi",
      start + "Content-Length: 2, 2\r\n\r\nhi",
      start + "Content-Length: +2\r\n\r\nhi",
      start + "Content-Length: 2\r\n\r\nh",  // not all here
      start + "Content-Length: 2\r\n",       // no end of header
  };
  for (const std::string& line : {
           std::string("X-A: a\r\n b\r\n"),                    // obs-fold
           std::string("X-A: a\n"),                            // bare LF
           std::string("X-A: a\rX-Idempotency-Fence: 9\r\n"),  // bare CR
           std::string("X-A: a\0b\r\n", 9),                    // NUL
           std::string("X-A: a\x7f\r\n"),                      // DEL
           std::string("X-A : a\r\n"),                         // a space before the colon
           std::string(": a\r\n"),                             // no name
           std::string("X(A): a\r\n"),                         // not a token
           std::string("Upgrade: h2c\r\n"),
           std::string("Proxy-Connection: close\r\n"),
           std::string("Transfer-Encoding: chunked\r\n"),
           std::string("Expect: 100-continue\r\n"),
           std::string("Connection: upgrade\r\n"),
           std::string("Connection: close,,x\r\n"),
           std::string("Connection:\r\n"),
       }) {
    cases.push_back(start + line + rest);
  }
  return cases;
}

}  // namespace idempotency::testing
