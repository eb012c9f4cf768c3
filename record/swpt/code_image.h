// The code of one ELF executable as the synthesizer walks it: PT_LOAD segments at their run-time
// addresses, function symbols, and the GOT ranges (to tell calls leaving the image).
#ifndef PTKIT_RECORD_SWPT_CODE_IMAGE_H_
#define PTKIT_RECORD_SWPT_CODE_IMAGE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ptkit::swpt {

struct LoadSegment {
  uint64_t vaddr = 0;        // Run-time address (link-time address + bias).
  uint64_t file_offset = 0;  // p_offset.
  uint64_t filesz = 0;
  uint64_t memsz = 0;
  bool exec = false;
};

struct Function {
  std::string name;
  uint64_t addr = 0;  // Run-time address.
  uint64_t size = 0;
};

class CodeImage {
 public:
  // Default load base for position-independent executables (where Linux puts them without ASLR).
  static constexpr uint64_t kDefaultPieBase = 0x555555554000;

  // Reads the ELF file at `path` (x86-64 ET_EXEC or ET_DYN). A PIE is placed at `pie_base`
  // (page aligned); an ET_EXEC keeps its link addresses. Fails with NotFound/PermissionDenied
  // when the file cannot be read, InvalidArgument when it is not a usable x86-64 ELF with
  // executable PT_LOAD segments.
  static absl::StatusOr<CodeImage> Load(const std::string& path,
                                        uint64_t pie_base = kDefaultPieBase);

  const std::string& path() const { return path_; }
  bool pie() const { return pie_; }
  // Run-time address minus link-time address (0 for ET_EXEC).
  uint64_t bias() const { return bias_; }
  // Where the image is loaded: the lowest PT_LOAD run-time address, page aligned down.
  uint64_t load_base() const { return load_base_; }
  // Run-time address of the lowest executable segment (what `ptdecode --elf FILE:BASE` wants).
  uint64_t exec_base() const;
  const std::vector<LoadSegment>& segments() const { return segments_; }
  // STT_FUNC symbols with a size, sorted by address.
  const std::vector<Function>& functions() const { return functions_; }

  // Bytes at run-time address `addr` backed by the file, up to the end of its segment's file
  // data; nullptr if none. `*avail` receives the number of readable bytes.
  const uint8_t* Read(uint64_t addr, size_t* avail) const;
  // True if `addr` is inside an executable segment's file data.
  bool IsCode(uint64_t addr) const;
  // True if `addr` is inside .got or .got.plt.
  bool IsGot(uint64_t addr) const;
  // The function whose [addr, addr+size) holds `addr`, or nullptr.
  const Function* FunctionAt(uint64_t addr) const;
  // The run-time address of function `name`.
  std::optional<uint64_t> FunctionAddress(const std::string& name) const;

 private:
  CodeImage() = default;

  std::string path_;
  std::vector<uint8_t> file_;
  bool pie_ = false;
  uint64_t bias_ = 0;
  uint64_t load_base_ = 0;
  std::vector<LoadSegment> segments_;
  std::vector<Function> functions_;
  std::vector<std::pair<uint64_t, uint64_t>> got_;  // [begin, end) run-time.
};

}  // namespace ptkit::swpt

#endif  // PTKIT_RECORD_SWPT_CODE_IMAGE_H_
