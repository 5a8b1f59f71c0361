// Running a loop of independent items on several threads inside the compiled core.
#pragma once

#include <cstddef>
#include <functional>

namespace sdscore {

// Calls body(i) for every i in [0, n) on up to `threads` threads (dynamic scheduling: each thread
// takes the next free item). The threads are the team of the OpenMP runtime already in the
// process (torch's libgomp) when there is one: one team shared with torch's ops instead of two
// teams competing for the same cores (`import sdscore` sets OMP_WAIT_POLICY=PASSIVE, so its
// workers sleep between ops rather than spin). Without one, std::threads. threads <= 1 or n <= 1 runs inline. body must not throw.
void parallel_for(size_t n, size_t threads, const std::function<void(size_t)>& body);

}  // namespace sdscore
