// What the kernel would make of an execve of a file, decided before it runs, for a program
// run under qemu-x86_64 (which loads only ELF programs): the workload ptrecord --emulate=qemu
// starts, and each program the guest exec's (the plugin, qemu_plugin/ptkit_qemu.cc). A #!
// script resolves to its interpreter, with the argv binfmt_script gives it.
#ifndef PTKIT_RECORD_EMULATE_EXEC_PLAN_H_
#define PTKIT_RECORD_EMULATE_EXEC_PLAN_H_

#include <string>
#include <vector>

namespace ptkit::emulate {

enum class ExecPlan {
  kFails,        // the kernel refuses it (the native call returns that errno to the guest)
  kFollow,       // an x86-64 ELF program (itself, or the interpreter of #! scripts)
  kNotFollowed,  // may run, but not under qemu-x86_64 (another ABI, binfmt_misc, unreadable)
};

struct Exec {
  std::string program;  // the ELF file qemu-x86_64 loads (kFollow; else the plugin puts the
                        // file execve was given there)
  std::vector<std::string> argv;  // the new program's, argv[0] included
  std::vector<std::string> envp;
  std::string comm;  // the kernel's: the basename of the file execve was given
  int error = 0;     // PlanFile's kFails: the errno execve returns (ENOEXEC: not a program)
};

// The kernel's checks and loaders, for the file `path` (fs/exec.c do_open_execat: a regular
// file, executable, not on a noexec mount; fs/binfmt_script.c: "#!" INTERPRETER [ARG] in the
// first 256 bytes, argv becomes INTERPRETER [ARG] PATH argv[1..], looked up again;
// fs/binfmt_elf.c: the ELF class, machine and PT_INTERP). Sets e->program and, for a script,
// e->argv (e->argv holds the argv execve was given); for kFails, e->error.
ExecPlan PlanFile(std::string path, Exec* e);

}  // namespace ptkit::emulate

#endif  // PTKIT_RECORD_EMULATE_EXEC_PLAN_H_
