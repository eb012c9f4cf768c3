// The CPUs this process may run on, for sizing helper threads.
#ifndef PTKIT_USABLE_CPUS_H_
#define PTKIT_USABLE_CPUS_H_

#include <sched.h>

#include <thread>

namespace ptkit {

// CPUs this thread may run on (threads it starts inherit that): its affinity mask, not the
// machine's CPUs. (A cgroup CPU quota is not seen; with more than 1024 possible CPUs the call
// fails and every CPU counts.)
inline int UsableCpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace ptkit

#endif  // PTKIT_USABLE_CPUS_H_
