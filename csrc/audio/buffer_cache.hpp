// Reuse of the large float buffers that load_many hands to numpy. A fresh multi-megabyte
// buffer costs a page fault and a kernel page-zeroing per 4 KiB page on first touch (~12 ms
// per 69 MB here, about a tenth of a 44.1 kHz -> 16 kHz batch load); bulk scoring loads one
// window after another, so the buffer numpy just freed is handed to the next batch instead.
#pragma once

#include <cstddef>

namespace sdscore {

// An uninitialised buffer of at least `count` floats (null for 0). Buffers of 2 MiB or more
// are 2 MiB aligned, marked for transparent huge pages and may be a cached one; smaller ones
// come from malloc. Throws std::bad_alloc.
float* acquire_floats(size_t count);

// Gives back a buffer from acquire_floats (null is ignored). Large ones are kept for reuse
// while the cache holds at most kMaxCachedBuffers buffers and kMaxCachedBytes bytes; the
// rest are freed.
void release_floats(float* p);

constexpr size_t kMaxCachedBuffers = 4;
constexpr size_t kMaxCachedBytes = size_t{256} << 20;

}  // namespace sdscore
