// Test fixture of tests/distributed/test_nccl_watchdog.py: a device named
// "cuda" with $FAKE_CUDA_DEVICES ordinals (default 2) whose memory is host
// memory, so that dragon-nccl-dist's cuda kernels run on a machine without
// a GPU, against the stand-in libnccl of test_destroy.py. Synchronous (no
// streams: kernels get a null stream), host_accessible 0 (the core moves
// data with the copies below). Loaded with dragon_core.load_library in a
// process where the real cuda plugin is disabled.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dragon/plugin.hpp"

namespace {

int32_t Count(void*) {
  const char* v = std::getenv("FAKE_CUDA_DEVICES");
  return v ? std::atoi(v) : 2;
}

DgStatus Alloc(void*, int32_t index, size_t bytes, void** ptr) {
  if (index < 0 || index >= Count(nullptr)) return DG_INVALID_ARGUMENT;
  *ptr = std::malloc(bytes ? bytes : 1);
  return *ptr ? DG_OK : DG_RESOURCE_EXHAUSTED;
}
void Free(void*, int32_t, void* ptr) { std::free(ptr); }
DgStatus Copy(void*, int32_t, void* dst, const void* src, size_t n, void*) {
  if (n) std::memmove(dst, src, n);
  return DG_OK;
}
DgStatus Memset(void*, int32_t, void* dst, int32_t value, size_t n, void*) {
  if (n) std::memset(dst, value, n);
  return DG_OK;
}
DgStatus StreamCreate(void*, int32_t, void** stream) {
  *stream = nullptr;
  return DG_OK;
}
DgStatus StreamNoop(void*, int32_t, void*) { return DG_OK; }
DgStatus Synchronize(void*, int32_t) { return DG_OK; }
DgStatus Describe(void*, int32_t index, char* buf, size_t len) {
  if (buf && len) std::snprintf(buf, len, "fake cuda:%d (host memory)", index);
  return DG_OK;
}

DgStatus Register(const DgHostApi*, DgRegistrar* reg) {
  DgDeviceDef d{};
  d.struct_size = sizeof(DgDeviceDef);
  d.name = "cuda";
  d.count = &Count;
  d.alloc = &Alloc;
  d.free = &Free;
  d.copy_h2d = &Copy;
  d.copy_d2h = &Copy;
  d.copy_d2d = &Copy;
  d.memset = &Memset;
  d.stream_create = &StreamCreate;
  d.stream_destroy = &StreamNoop;
  d.stream_sync = &StreamNoop;
  d.synchronize = &Synchronize;
  d.describe = &Describe;
  d.host_accessible = 0;
  return reg->register_device(reg->ctx, &d);
}

DG_INIT_HOOK(&Register);

}  // namespace

DG_PLUGIN("fake_cuda", "0.1.0")
