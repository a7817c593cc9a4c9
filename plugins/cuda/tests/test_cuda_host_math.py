"""Host-side tests of the cuda kernels' shared math that runs without a GPU.

``src/multi_tensor.h`` (the chunk table of the multi-tensor optimizer
kernels) is plain C++: it is compiled here with the host compiler and its
chunk assignment and binary search are checked against a linear scan over
many parameter lists (empty parameters, chunk-size boundaries, one
parameter, thousands of parameters).
"""

from __future__ import annotations


from _host_cpp import run_program


PROGRAM = r"""
#include <cstdio>
#include <cstdint>
#include <random>
#include <vector>
#include "multi_tensor.h"

using namespace dragon_cuda;

struct S { int64_t n = 0, first_chunk = -1; };

// Every chunk maps to the one slot whose element range holds it; returns the
// number of failures (printed).
static int Check(const std::vector<int64_t>& counts) {
  std::vector<S> slots(counts.size());
  for (size_t k = 0; k < counts.size(); ++k) slots[k].n = counts[k];
  const int64_t total = AssignChunks(&slots);
  int64_t want_total = 0, chunk = 0;
  int fails = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int64_t c = (counts[k] + kChunk - 1) / kChunk;
    want_total += c;
    if (slots[k].first_chunk != chunk) {
      std::printf("slot %zu: first_chunk %lld, want %lld\n", k, (long long)slots[k].first_chunk,
                  (long long)chunk);
      ++fails;
    }
    for (int64_t j = 0; j < c; ++j, ++chunk) {
      const int32_t got = FindSlot(slots.data(), (int32_t)slots.size(), chunk);
      if (got != (int32_t)k) {
        std::printf("chunk %lld: slot %d, want %zu\n", (long long)chunk, got, k);
        ++fails;
      }
      // The chunk's elements lie inside the parameter.
      const int64_t begin = (chunk - slots[got].first_chunk) * kChunk;
      if (begin < 0 || begin >= slots[got].n) {
        std::printf("chunk %lld: begin %lld outside %lld elements\n", (long long)chunk,
                    (long long)begin, (long long)slots[got].n);
        ++fails;
      }
    }
  }
  if (total != want_total) {
    std::printf("total %lld, want %lld\n", (long long)total, (long long)want_total);
    ++fails;
  }
  return fails;
}

int main() {
  int fails = 0;
  const int64_t K = kChunk;
  const std::vector<std::vector<int64_t>> fixed = {
      {1}, {0}, {0, 0, 5}, {5, 0, 0}, {K}, {K + 1}, {K - 1, K, K + 1}, {0, K, 0, 2 * K, 0},
      {3 * K + 7, 1, 0, 1, K}, {1, 1, 1, 1, 1, 1, 1}};
  for (const auto& c : fixed) fails += Check(c);
  std::mt19937_64 rng(7);
  for (int t = 0; t < 300; ++t) {
    std::vector<int64_t> c(1 + rng() % (t < 290 ? 40 : 3000));
    for (auto& v : c) {
      const int kind = (int)(rng() % 4);
      v = kind == 0 ? 0 : kind == 1 ? (int64_t)(rng() % 20) : kind == 2 ? (int64_t)(rng() % (4 * K))
                                                                         : K * (int64_t)(rng() % 3);
    }
    fails += Check(c);
  }
  if (ChunkBlocks(0) != 1 || ChunkBlocks(5) != 5 || ChunkBlocks(int64_t{1} << 40) != (1u << 20)) {
    std::printf("ChunkBlocks\n");
    ++fails;
  }
  std::printf(fails ? "FAILED %d\n" : "OK\n", fails);
  return fails ? 1 : 0;
}
"""


def test_multi_tensor_chunk_table(tmp_path):
    run_program(tmp_path, "chunks", PROGRAM)
