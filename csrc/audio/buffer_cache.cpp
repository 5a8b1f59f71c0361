#include "audio/buffer_cache.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace sdscore {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

struct Cache {
  std::mutex mutex;
  std::unordered_map<void*, size_t> live;        // handed out: capacity in bytes (0: malloc'd)
  std::vector<std::pair<void*, size_t>> idle;    // kept for reuse, oldest first
  size_t idle_bytes = 0;
};

// Never destroyed: numpy may free a buffer while the interpreter shuts down.
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

}  // namespace

float* acquire_floats(size_t count) {
  if (count == 0) return nullptr;
  if (count > SIZE_MAX / sizeof(float) - kHugePageBytes) throw std::bad_alloc();
  const size_t bytes = count * sizeof(float);
  Cache& c = cache();
  if (bytes < kHugePageBytes) {
    void* p = std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.live.emplace(p, 0);
    return static_cast<float*>(p);
  }
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    // The smallest idle buffer that fits.
    size_t best = c.idle.size();
    for (size_t i = 0; i < c.idle.size(); ++i) {
      const bool fits = c.idle[i].second >= rounded;
      if (fits && (best == c.idle.size() || c.idle[i].second < c.idle[best].second)) best = i;
    }
    if (best < c.idle.size()) {
      const auto [p, capacity] = c.idle[best];
      c.idle.erase(c.idle.begin() + static_cast<std::ptrdiff_t>(best));
      c.idle_bytes -= capacity;
      c.live.emplace(p, capacity);
      return static_cast<float*>(p);
    }
  }
  void* p = nullptr;
  if (posix_memalign(&p, kHugePageBytes, rounded) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint; failure only costs speed
#endif
  std::lock_guard<std::mutex> lock(c.mutex);
  c.live.emplace(p, rounded);
  return static_cast<float*>(p);
}

void release_floats(float* p) {
  if (p == nullptr) return;
  Cache& c = cache();
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.live.find(p);
    const size_t capacity = it == c.live.end() ? 0 : it->second;
    if (it != c.live.end()) c.live.erase(it);
    if (capacity == 0 || capacity > kMaxCachedBytes) {
      to_free.push_back(p);
    } else {
      c.idle.emplace_back(p, capacity);
      c.idle_bytes += capacity;
      // Over either bound: drop the oldest.
      while (c.idle.size() > kMaxCachedBuffers || c.idle_bytes > kMaxCachedBytes) {
        to_free.push_back(c.idle.front().first);
        c.idle_bytes -= c.idle.front().second;
        c.idle.erase(c.idle.begin());
      }
    }
  }
  for (void* q : to_free) std::free(q);
}

}  // namespace sdscore
