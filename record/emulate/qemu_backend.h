// SPDX-License-Identifier: Apache-2.0
//
// `ptrecord --emulate=qemu`: the workload runs under qemu-x86_64 (Debian's qemu-user) with
// ptkit's TCG plugin (qemu_plugin/), which writes each guest thread's control flow as Intel PT
// and the guest's sideband into a shared region laid out like per-thread perf mmaps
// (qemu_ring.h). ptrecord drains it with the same Drainer and drain loop as kernel events.
#ifndef PTKIT_RECORD_EMULATE_QEMU_BACKEND_H_
#define PTKIT_RECORD_EMULATE_QEMU_BACKEND_H_

#include <string>

#include "absl/status/statusor.h"
#include "record/emulate/emulate.h"

namespace ptkit::emulate {

// What runs the workload.
struct QemuSetup {
  std::string qemu;     // path of qemu-x86_64
  std::string plugin;   // path of libptkit_qemu.so
  std::string version;  // "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"
};

// The plugin's file name, looked for next to the ptrecord executable (the build tree), then
// where `cmake --install` puts it (LIBEXECDIR/ptkit, relative to ptrecord's BINDIR).
inline constexpr char kQemuPluginName[] = "libptkit_qemu.so";

// Checks that the file `path` is ptkit's QEMU plugin for this ptrecord: an x86-64 shared
// object exporting qemu_plugin_install and QemuPluginAbi (`ptkit_qemu_abi`) with this region
// version. Errors (kFailedPrecondition, one line naming the file and what to do): not ELF,
// not a QEMU plugin, not ptkit's, another region version. `given`: the user named the file
// (--qemu-plugin), so what to do is to name this build's plugin, not to name one.
absl::Status CheckQemuPlugin(const std::string& path, bool given = false);

// The wait status the guest would have given natively, from qemu-x86_64's: qemu dies of the
// host's number of the guest's fatal signal, which for real-time signals is the guest's + 2
// (sweep 29c F1: SIGRTMIN+3, 37, was reported as 39, exit 167 for 165).
// Only for QEMU 7 (`version` as QemuSetup's): other versions map otherwise.
int GuestWaitStatus(int host_status, const std::string& version);

// Finds qemu-x86_64 on PATH and the plugin (`plugin`, else next to `self_exe`, else installed
// beside it), and asks QEMU
// its version. Errors (kFailedPrecondition, one line each): qemu-x86_64 not found (names the
// Debian package), the plugin not found, not readable or not this ptrecord's (CheckQemuPlugin).
absl::StatusOr<QemuSetup> FindQemu(const std::string& plugin, const std::string& self_exe);

// Records the workload under QEMU (RecordEmulated with backend "qemu" calls it). The same
// contract as RecordEmulated; in addition: --bts is refused (kInvalidArgument, exit 2, naming
// --emulate=step) and errors the plugin reported are returned (kInternal). --filter is the
// step backend's (block granularity: the state changes only at branches, which end blocks).
// max_steps limits the guest's instructions (over all its threads and processes) at a block
// boundary: at most that many run, every stream ends before the block that would exceed it,
// and the workload is killed. A program the workload exec's runs under a new qemu-x86_64 with
// the plugin, in the exec'ing thread's stream (qemu_plugin/ptkit_qemu.cc says when it cannot).
// snapshot_size: the threads' AUX rings are overwritten, a SIGUSR2 snapshots every running
// thread's and the end every thread's (each flushed first). aux_sample_size: AUX samples
// every sample_period instructions of each thread, as the step backend takes them.
absl::StatusOr<EmulateResult> RecordQemu(const EmulateOptions& options);

}  // namespace ptkit::emulate

#endif  // PTKIT_RECORD_EMULATE_QEMU_BACKEND_H_
