// A fresh directory under $TMPDIR (or /tmp) for one test, removed with its contents at the end.
#ifndef PTKIT_TESTS_SUPPORT_TEMP_DIR_H_
#define PTKIT_TESTS_SUPPORT_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ptkit::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ptkit-test-XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    path_ = made ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // A copy of the file `from` named `name` here, executable by its owner; its path. A uprobe
  // is on a file (inode and offset): a test that sets one runs a copy of its own, so that
  // other tests running the program at the same time do not hit its INT3 (under qemu, which
  // reads the code from memory, they would die of SIGTRAP).
  std::string Copy(const std::string& from, const std::string& name) const {
    std::string to = File(name);
    std::filesystem::copy_file(from, to);
    std::filesystem::permissions(to, std::filesystem::perms::owner_exec,
                                 std::filesystem::perm_options::add);
    return to;
  }

 private:
  std::string path_;
};

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_TEMP_DIR_H_
