// `--srcline`: "file:line" of code addresses from the DWARF line tables of the image's ELF
// files (libdw), or of their separate debug files when they are stripped (FindDebugFile).
//
// Answers are cached per address. A file without DWARF line information (no line table in it
// or in its debug file: stripped, raw bytes, page dumps, the vdso) gives no answer; it is
// reported once on `diagnostics`, naming it, and listed in files_without_lines().
//
// Addresses are turned into the file's link-time addresses by ProgramImage::LinkAddress (where
// it placed the file's segments), so only ELF files added with AddElf or AddFileMapping get
// answers.
#ifndef PTKIT_DECODER_SRCLINE_H_
#define PTKIT_DECODER_SRCLINE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "decoder/image.h"

namespace ptkit::decoder {

class SourceLines {
 public:
  // `diagnostics`: where files without line information are reported (null: nowhere).
  explicit SourceLines(std::FILE* diagnostics);
  ~SourceLines();
  SourceLines(const SourceLines&) = delete;
  SourceLines& operator=(const SourceLines&) = delete;

  // "file:line" of the instruction at `ip` in `image`, or null when it is not known. The
  // string lives as long as this object.
  const std::string* Lookup(const ProgramImage& image, uint64_t ip);

  // The source file of the function the instruction at `ip` belongs to, as addr2line -i's last
  // frame and gdb place it (not a function inlined at `ip`): the outermost subprogram's
  // DW_AT_decl_file, else its compilation unit's name; null when it is not known.
  const std::string* FunctionSource(const ProgramImage& image, uint64_t ip);

  // The files met so far that have no DWARF line information, in the order met.
  const std::vector<std::string>& files_without_lines() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ptkit::decoder

#endif  // PTKIT_DECODER_SRCLINE_H_
