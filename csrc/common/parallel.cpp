#include "common/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <dlfcn.h>
#include <thread>
#include <vector>

namespace sdscore {
namespace {

// GOMP_parallel of the OpenMP runtime already loaded (torch's libgomp), or null.
using GompParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);

GompParallel host_openmp() {
  static const GompParallel fn = []() -> GompParallel {
    void* lib = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);  // never loads one itself
    return lib ? reinterpret_cast<GompParallel>(dlsym(lib, "GOMP_parallel")) : nullptr;
  }();
  return fn;
}

}  // namespace

void parallel_for(size_t n, size_t threads, const std::function<void(size_t)>& body) {
  threads = std::min(threads, n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<size_t> next{0};
  const std::function<void()> work = [&] {
    for (size_t i = next++; i < n; i = next++) body(i);
  };
  if (GompParallel gomp = host_openmp()) {
    gomp([](void* w) { (*static_cast<const std::function<void()>*>(w))(); },
         const_cast<std::function<void()>*>(&work), static_cast<unsigned>(threads), 0);
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
  }
}

}  // namespace sdscore
