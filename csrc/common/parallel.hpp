// Running a loop of independent items on several threads inside the compiled core.
#pragma once

#include <cstddef>
#include <functional>

namespace sdscore {

// Calls body(i) for every i in [0, n) on up to `threads` threads (dynamic scheduling: each thread
// takes the next free item). The threads are the team of the OpenMP runtime already in the
// process (torch's libgomp) when there is one: torch keeps those workers spinning between its
// ops, and threads of our own would compete with the spinners for the same cores. Without one,
// std::threads. threads <= 1 or n <= 1 runs inline. body must not throw.
void parallel_for(size_t n, size_t threads, const std::function<void(size_t)>& body);

}  // namespace sdscore
