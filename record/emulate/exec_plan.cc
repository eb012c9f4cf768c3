#include "record/emulate/exec_plan.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>

namespace ptkit::emulate {
namespace {

bool SpaceTab(char c) { return c == ' ' || c == '\t'; }

// Whether binfmt_misc has handlers that may run a file of an unknown format.
bool HaveBinfmtMisc() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/sys/fs/binfmt_misc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name != "register" && name != "status") return true;
  }
  return false;
}

}  // namespace

ExecPlan PlanFile(std::string path, Exec* e) {
  auto fails = [e](int err) {
    e->error = err;
    return ExecPlan::kFails;
  };
  for (int depth = 0; depth <= 4; ++depth) {  // BINPRM_MAX_RECURSION
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return fails(errno);  // ENOENT, ENOTDIR, ELOOP, ...
    if (!S_ISREG(st.st_mode) || faccessat(AT_FDCWD, path.c_str(), X_OK, AT_EACCESS) != 0) {
      return fails(EACCES);
    }
    struct statvfs fs {};
    if (statvfs(path.c_str(), &fs) == 0 && (fs.f_flag & ST_NOEXEC) != 0) return fails(EACCES);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ExecPlan::kNotFollowed;  // execute-only: qemu cannot read it
    char buf[256] = {};                         // BINPRM_BUF_SIZE
    const ssize_t got = pread(fd, buf, sizeof(buf), 0);
    Elf64_Ehdr eh{};
    std::memcpy(&eh, buf, sizeof(eh));
    std::string interp;
    bool interp_ok = true;
    if (got >= static_cast<ssize_t>(sizeof(eh)) && std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0) {
      for (unsigned i = 0; i < eh.e_phnum && eh.e_phentsize == sizeof(Elf64_Phdr); ++i) {
        Elf64_Phdr ph{};
        if (pread(fd, &ph, sizeof(ph), static_cast<off_t>(eh.e_phoff + i * sizeof(ph))) !=
            sizeof(ph)) {
          break;
        }
        if (ph.p_type != PT_INTERP || ph.p_filesz == 0 || ph.p_filesz > 4096) continue;
        interp.resize(ph.p_filesz);
        interp_ok = pread(fd, interp.data(), ph.p_filesz, static_cast<off_t>(ph.p_offset)) ==
                    static_cast<ssize_t>(ph.p_filesz);
        interp.resize(std::strlen(interp.c_str()));
      }
    }
    close(fd);
    if (got >= static_cast<ssize_t>(sizeof(eh)) && std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0) {
      if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
          eh.e_machine != EM_X86_64 || (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)) {
        return ExecPlan::kNotFollowed;  // ENOEXEC, or an i386 program that runs natively
      }
      if (!interp_ok) return ExecPlan::kNotFollowed;
      struct stat ist {};
      if (!interp.empty() && stat(interp.c_str(), &ist) != 0) return fails(ENOENT);
      e->program = path;
      return ExecPlan::kFollow;
    }
    if (got < 2 || buf[0] != '#' || buf[1] != '!') {
      // ENOEXEC, unless a binfmt_misc handler takes it.
      return HaveBinfmtMisc() ? ExecPlan::kNotFollowed : fails(ENOEXEC);
    }
    // binfmt_script.c: the line ends at a newline (or the buffer's end, if the name is
    // terminated before it); a NUL ends the strings.
    std::string_view line(buf + 2, sizeof(buf) - 2);
    const size_t nl = line.find('\n');
    if (nl == std::string_view::npos) {
      const size_t name = line.find_first_not_of(" \t");
      if (name == std::string_view::npos ||
          line.find_first_of(std::string_view(" \t\0", 3), name) == std::string_view::npos) {
        return fails(ENOEXEC);  // the interpreter's name is cut off
      }
    } else {
      line = line.substr(0, nl);
    }
    line = line.substr(0, line.find('\0'));
    while (!line.empty() && SpaceTab(line.back())) line.remove_suffix(1);
    while (!line.empty() && SpaceTab(line.front())) line.remove_prefix(1);
    if (line.empty()) return fails(ENOEXEC);  // no interpreter
    const size_t sep = line.find_first_of(" \t");
    const std::string name(line.substr(0, sep));
    std::vector<std::string> argv = {name};
    if (sep != std::string_view::npos) {
      std::string_view arg = line.substr(sep);
      while (!arg.empty() && SpaceTab(arg.front())) arg.remove_prefix(1);
      if (!arg.empty()) argv.emplace_back(arg);
    }
    argv.push_back(path);
    if (!e->argv.empty()) argv.insert(argv.end(), e->argv.begin() + 1, e->argv.end());
    e->argv = std::move(argv);
    path = name;
  }
  return ExecPlan::kNotFollowed;  // (the kernel: ELOOP)
}

}  // namespace ptkit::emulate
