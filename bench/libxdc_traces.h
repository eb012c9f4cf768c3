// Benchmark helper: the real traces of ../shared/testdata/libxdc-experiments (Unzip, foo), each
// a raw PT file and the page dumps it ran in.
#ifndef PTKIT_BENCH_LIBXDC_TRACES_H_
#define PTKIT_BENCH_LIBXDC_TRACES_H_

#include <memory>
#include <string>
#include <utility>

#include "decoder/raw_input.h"

namespace ptkit::decoder {

// The trace `name` with its pages loaded, or null when it is absent (the shared test data is
// not part of the repository) or does not load.
inline std::unique_ptr<RawInput> LoadLibxdcTrace(const std::string& name) {
  const std::string dir =
      std::string(PTKIT_SOURCE_DIR) + "/../shared/testdata/libxdc-experiments/" + name;
  RawInputSpec spec;
  spec.pt_path = dir + "/trace";
  spec.page_dumps.push_back(ParsePageDumpSpec(dir));
  auto input = LoadRawInput(spec);
  if (!input.ok()) return nullptr;
  return std::make_unique<RawInput>(std::move(*input));
}

}  // namespace ptkit::decoder

#endif  // PTKIT_BENCH_LIBXDC_TRACES_H_
