// The least CPU a blocking store call can cost on this machine, measured without the library,
// so that a target below it can be shown unreachable in the same run (`store_bench floor`).
#pragma once

namespace bench {

/// blocking_floor() prints three JSON lines (kind "blocking_floor"): the client CPU of a claim +
/// complete pair made of two bare blocking round trips on one connection to the Redis at
/// 127.0.0.1:`port` (`SET NX PX GET`, then `SET XX PX`, nothing else), and the CPU of one
/// thread waking another asleep on a condition variable, pinned to one core, then not. Each runs
/// `seconds` after half a second unrecorded. Returns the process's exit code.
int blocking_floor(int port, double seconds);

}  // namespace bench
