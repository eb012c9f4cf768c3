// The instruction streams of an emulated recording, per thread: the recorder's ground truth
// (`ptrecord --emulate --ground-truth FILE`) and what `ptdecode insn trace.pt` printed.
#ifndef PTKIT_TESTS_SUPPORT_GROUND_TRUTH_H_
#define PTKIT_TESTS_SUPPORT_GROUND_TRUTH_H_

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "run_command.h"

namespace ptkit::testing {

// Thread id -> instruction addresses in the order they ran.
using PerThread = std::map<uint64_t, std::vector<uint64_t>>;

// [begin, end) of function `name` in `program` by `nm -S` (the oracle for symbol ranges);
// {0, 0} when it has none.
inline std::pair<uint64_t, uint64_t> NmRange(const std::string& program, const std::string& name) {
  auto r = RunCommand({"/usr/bin/nm", "-S", "--defined-only", program});
  std::istringstream in(r.out);
  std::string address, size, type, symbol;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    if (fields >> address >> size >> type >> symbol && symbol == name) {
      const uint64_t begin = std::stoull(address, nullptr, 16);
      return {begin, begin + std::stoull(size, nullptr, 16)};
    }
  }
  return {0, 0};
}

// As NmRange, for a name as `nm -C` demangles it (C++ names, with spaces).
inline std::pair<uint64_t, uint64_t> NmRangeDemangled(const std::string& program,
                                                      const std::string& name) {
  auto r = RunCommand({"/usr/bin/nm", "-S", "-C", "--defined-only", program});
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string address, size, type, symbol;
    if (!(fields >> address >> size >> type)) continue;
    std::getline(fields >> std::ws, symbol);
    if (symbol == name) {
      const uint64_t begin = std::stoull(address, nullptr, 16);
      return {begin, begin + std::stoull(size, nullptr, 16)};
    }
  }
  return {0, 0};
}

// The instruction addresses of function `name` in `program` by objdump -d.
inline std::vector<uint64_t> ObjdumpInstructions(const std::string& program,
                                                 const std::string& name) {
  static std::map<std::string, std::string> disassembly;  // by program (objdump is slow)
  if (!disassembly.contains(program)) {
    disassembly[program] =
        RunCommand({"/usr/bin/objdump", "-d", "--no-show-raw-insn", program}).out;
  }
  std::vector<uint64_t> addresses;
  bool in = false;
  std::istringstream lines(disassembly[program]);
  for (std::string line; std::getline(lines, line);) {
    if (line.ends_with(">:")) in = line.ends_with("<" + name + ">:");
    uint64_t address = 0;
    if (in && std::sscanf(line.c_str(), " %" SCNx64 ":", &address) == 1 &&
        line.find(':') != std::string::npos && line[0] == ' ') {
      addresses.push_back(address);
    }
  }
  return addresses;
}

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
