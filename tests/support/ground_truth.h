// The instruction streams of an emulated recording, per thread: the recorder's ground truth
// (`ptrecord --emulate --ground-truth FILE`) and what `ptdecode insn trace.pt` printed.
#ifndef PTKIT_TESTS_SUPPORT_GROUND_TRUTH_H_
#define PTKIT_TESTS_SUPPORT_GROUND_TRUTH_H_

#include <charconv>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "read_file.h"
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

// One "TID ADDRESS" pair at `line` (TID decimal, ADDRESS hex with or without 0x); false when it
// is not one. Parsed with from_chars: the recordings' tens of millions of lines took
// istringstream and stoull about 20 s.
inline bool ParseTidAddress(std::string_view line, uint64_t& tid, uint64_t& address) {
  const char* p = line.data();
  const char* const end = p + line.size();
  auto r = std::from_chars(p, end, tid);
  if (r.ec != std::errc()) return false;
  p = r.ptr;
  while (p != end && *p == ' ') ++p;
  if (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) p += 2;
  return std::from_chars(p, end, address, 16).ec == std::errc();
}

// The ground truth file: one "TID 0xADDRESS" line per retired instruction. Calls
// `take(tid, ip)` for each in file order until it returns false.
template <typename Take>
void ForEachTruthLine(const std::string& path, Take take) {
  const std::string text = ReadWholeFile<std::string>(path);
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    const size_t start = line.find_first_not_of(' ');
    uint64_t tid = 0, ip = 0;
    if (start != std::string_view::npos && ParseTidAddress(line.substr(start), tid, ip) &&
        !take(tid, ip)) {
      return;
    }
  }
}

inline PerThread ReadTruth(const std::string& path) {
  PerThread truth;
  ForEachTruthLine(path, [&](uint64_t tid, uint64_t ip) {
    truth[tid].push_back(ip);
    return true;
  });
  return truth;
}

// The thread the ground truth at `path` begins with: the command's own (the first to run),
// where the lowest tid may be a child's once pids wrap (pid_max 32768 here: a test that took
// the lowest for the parent failed now and then); 0 when there is none.
inline uint64_t FirstTruthTid(const std::string& path) {
  uint64_t first = 0;
  ForEachTruthLine(path, [&](uint64_t tid, uint64_t) {
    first = tid;
    return false;
  });
  return first;
}

// `ptdecode insn` on a container: "[stream ...]" and other bracketed marker lines, and one
// line per instruction: "[TIME] tid TID ADDRESS symbol+offset" (ADDRESS in 16 hex digits).
inline PerThread ParseInsn(const std::string& out) {
  PerThread ips;
  std::string_view rest = out;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    // Optional leading columns (time) come before "tid".
    const size_t at = line.starts_with("tid ") ? 0 : line.find(" tid ");
    if (line.empty() || line[0] == '[' || at == std::string_view::npos) continue;
    uint64_t tid = 0, address = 0;
    if (ParseTidAddress(line.substr(at + (at == 0 ? 4 : 5)), tid, address)) {
      ips[tid].push_back(address);
    }
  }
  return ips;
}

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_GROUND_TRUTH_H_
