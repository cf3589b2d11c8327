// Waiting on one socket until a deadline: the non-blocking connect and the TLS handshake share
// one connect_timeout.
#pragma once

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>

namespace idempotency::redis_detail {

/// poll_until() waits until `fd` is ready for `events` or `deadline` passes (a signal does not
/// end the wait): > 0 ready, 0 timed out, < 0 failed with `errno` set.
inline int poll_until(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    pollfd waiting{fd, events, 0};
    const int ready =
        ::poll(&waiting, 1, static_cast<int>(std::min<long long>(left.count(), INT_MAX)));
    if (ready >= 0 || errno != EINTR) return ready;
  }
}

}  // namespace idempotency::redis_detail
