// Cache-line round trip between two CPUs: where the host placed them.
//
// Two threads, pinned to two CPUs of the process's affinity mask, hand one
// 64-byte line back and forth (each waits for the other's write, then
// writes). The round trip is the time of two such hand-overs. On the Zen 4
// virtual machine of docs/benchmarks.md it is 50-75 ns when the two vCPUs
// share a die (one L3) and 330-460 ns when they sit on two dies, and the
// compiled training steps run ~20% slower in the second placement
// (session 21); bench/placement.py records it with every timed round.
// Built by bench/placement.py with the system compiler (-O2 -pthread) and
// called through ctypes.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace {

struct alignas(64) Line {
  std::atomic<int64_t> value{0};
};

struct Args {
  Line* line;
  int64_t trips;
  int cpu;
  std::atomic<int> ready{0};  // 1 pinned, -1 not: then it returns at once
};

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// The partner: waits for each odd value and answers with the next one.
void* Partner(void* p) {
  Args* a = static_cast<Args*>(p);
  const bool pinned = Pin(a->cpu);
  a->ready.store(pinned ? 1 : -1, std::memory_order_release);
  if (!pinned) return nullptr;
  for (int64_t i = 0; i < a->trips; ++i) {
    while (a->line->value.load(std::memory_order_acquire) != 2 * i + 1) {
    }
    a->line->value.store(2 * i + 2, std::memory_order_release);
  }
  return nullptr;
}

}  // namespace

// Nanoseconds per round trip over `trips` round trips between the first two
// CPUs this process may run on; -1 when it may run on fewer than two, or a
// thread could not be started or pinned. The calling thread's affinity is
// restored afterwards.
extern "C" double placement_round_trip_ns(int64_t trips) {
  cpu_set_t mine;
  if (trips <= 0 ||
      pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine) != 0) {
    return -1.0;
  }
  int cpus[2] = {-1, -1};
  for (int c = 0, found = 0; c < CPU_SETSIZE && found < 2; ++c) {
    if (CPU_ISSET(c, &mine)) cpus[found++] = c;
  }
  if (cpus[1] < 0) return -1.0;
  Line line;
  Args args;
  args.line = &line;
  args.trips = trips;
  args.cpu = cpus[1];
  double ns = -1.0;
  pthread_t partner;
  if (Pin(cpus[0]) && pthread_create(&partner, nullptr, &Partner, &args) == 0) {
    int ready;
    while ((ready = args.ready.load(std::memory_order_acquire)) == 0) {
    }
    if (ready < 0) {  // the partner could not be pinned: no measurement
      pthread_join(partner, nullptr);
      pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine);
      return -1.0;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < trips; ++i) {
      line.value.store(2 * i + 1, std::memory_order_release);
      while (line.value.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
    const auto t1 = std::chrono::steady_clock::now();
    pthread_join(partner, nullptr);
    ns = std::chrono::duration<double, std::nano>(t1 - t0).count() /
         static_cast<double>(trips);
  }
  pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine);
  return ns;
}
