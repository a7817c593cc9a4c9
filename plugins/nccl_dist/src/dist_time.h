// Deadlines and sleeps from user timeouts, shared by the MPI and NCCL halves.
#pragma once

#include <chrono>
#include <thread>

namespace nccl_dist_time {

// A point `seconds` after now on the steady clock. The clock counts int64
// nanoseconds, so an infinite timeout (timeout=inf, DRAGON_DIST_TIMEOUT=inf)
// or one of more than ~292 years would overflow a cast into a deadline in
// the past; any timeout of 1e9 s (31 years) or more, and NaN, never expires.
inline std::chrono::steady_clock::time_point DeadlineAfter(double seconds) {
  if (!(seconds < 1e9)) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(seconds > 0 ? seconds : 0));
}

// Sleeps `seconds` (forever for an infinite or huge value, see DeadlineAfter).
inline void SleepSeconds(double seconds) {
  if (!(seconds < 1e9)) {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
  }
  std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(seconds > 0 ? seconds : 0)));
}

}  // namespace nccl_dist_time
