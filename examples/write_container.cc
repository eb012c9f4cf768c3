// write_container: writes a small trace.pt with every record kind through the public API, so
// `ptdecode info` has something to show before a recorder runs. The AUX bytes are real Intel PT
// from ../shared/testdata when present (argument 2), else a minimal PSB-only stream.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ptkit/container_writer.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: write_container OUT.pt [RAW_PT_FILE]\n");
    return 2;
  }
  std::vector<uint8_t> pt;
  if (argc == 3) {
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "write_container: cannot read %s\n", argv[2]);
      return 1;
    }
    pt.assign(std::istreambuf_iterator<char>(in), {});
  } else {
    // PSB (16 bytes: 02 82 repeated 8 times) followed by PSBEND (02 23).
    for (int i = 0; i < 8; ++i) pt.insert(pt.end(), {0x02, 0x82});
    pt.insert(pt.end(), {0x02, 0x23});
  }
  ptkit::WriterOptions options;
  options.overwrite = true;
  auto writer = ptkit::ContainerWriter::Create(argv[1], options);
  if (!writer.ok()) {
    std::fprintf(stderr, "write_container: %s\n", std::string(writer.status().message()).c_str());
    return 1;
  }
  ptkit::ContainerWriter& w = **writer;
  absl::Status s = w.AppendMetadata(
      R"({"tool":"write_container example","cpu_vendor":"GenuineIntel","pmu":"intel_pt"})");
  // Split the trace into 4 KiB AUX records on cpu 0, as a drain loop would.
  constexpr size_t kChunk = 4096;
  for (size_t off = 0; s.ok() && off < pt.size(); off += kChunk) {
    size_t n = std::min(kChunk, pt.size() - off);
    s = w.AppendAux({.stream = {ptkit::StreamKind::kCpu, 0},
                     .aux_offset = off,
                     .data = std::span<const uint8_t>(pt.data() + off, n)});
  }
  if (s.ok()) {
    std::vector<ptkit::CounterValue> counters = {{.name = "task-clock", .value = 1234567}};
    s = w.AppendCounters(counters);
  }
  if (absl::Status c = w.Close(); s.ok()) s = c;
  if (!s.ok()) {
    std::fprintf(stderr, "write_container: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
