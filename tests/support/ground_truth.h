// The instruction streams of an emulated recording, per thread: the recorder's ground truth
// (`ptrecord --emulate --ground-truth FILE`) and what `ptdecode insn trace.pt` printed.
#ifndef PTKIT_TESTS_SUPPORT_GROUND_TRUTH_H_
#define PTKIT_TESTS_SUPPORT_GROUND_TRUTH_H_

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ptkit::testing {

// Thread id -> instruction addresses in the order they ran.
using PerThread = std::map<uint64_t, std::vector<uint64_t>>;

// The ground truth file: one "TID 0xADDRESS" line per retired instruction.
inline PerThread ReadTruth(const std::string& path) {
  PerThread truth;
  std::ifstream in(path);
  uint64_t tid;
  std::string ip;
  while (in >> tid >> ip) truth[tid].push_back(std::stoull(ip, nullptr, 16));
  return truth;
}

// `ptdecode insn` on a container: "[stream ...]" and other bracketed marker lines, and one
// line per instruction: "[TIME] tid TID ADDRESS symbol+offset" (ADDRESS in 16 hex digits).
inline PerThread ParseInsn(const std::string& out) {
  PerThread ips;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    // Optional leading columns (time) come before "tid".
    const size_t at = line.rfind("tid ", 0) == 0 ? 0 : line.find(" tid ");
    if (line.empty() || line[0] == '[' || at == std::string::npos) continue;
    std::istringstream fields(line.substr(at + (at == 0 ? 4 : 5)));
    uint64_t tid = 0;
    std::string address;
    fields >> tid >> address;
    ips[tid].push_back(std::stoull(address, nullptr, 16));
  }
  return ips;
}

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_GROUND_TRUTH_H_
