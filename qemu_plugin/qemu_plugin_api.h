// SPDX-License-Identifier: GPL-2.0-or-later
//
// The part of QEMU's TCG plugin API (version 1, QEMU 5.2 .. 8.x) that the ptkit plugin uses,
// declared from the QEMU documentation ("TCG Plugins", docs/devel/tcg-plugins.rst: API
// reference). QEMU resolves these symbols in its own binary when it dlopen()s the plugin, so
// nothing is linked against them. No Debian package ships QEMU's own header.
#ifndef PTKIT_QEMU_PLUGIN_QEMU_PLUGIN_API_H_
#define PTKIT_QEMU_PLUGIN_QEMU_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

extern "C" {

// The API version this plugin is written for; QEMU refuses a plugin outside
// [info->version.min, info->version.cur].
inline constexpr int kQemuPluginApiVersion = 1;

typedef uint64_t qemu_plugin_id_t;

// What qemu_plugin_install() is told about the emulator.
typedef struct qemu_info_t {
  const char* target_name;  // "x86_64"
  struct {
    int min;  // oldest API version QEMU accepts
    int cur;  // the version QEMU implements
  } version;
  bool system_emulation;  // false for qemu-user
  union {
    struct {
      int smp_vcpus;
      int max_vcpus;
    } system;
  };
} qemu_info_t;

// Opaque handles, valid only inside the translation callback that hands them out.
struct qemu_plugin_tb;
struct qemu_plugin_insn;

// Whether a callback reads or writes the CPU registers (v1 has no register access: NO_REGS).
enum qemu_plugin_cb_flags {
  QEMU_PLUGIN_CB_NO_REGS,
  QEMU_PLUGIN_CB_R_REGS,
  QEMU_PLUGIN_CB_RW_REGS,
};

typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void* userdata);
typedef void (*qemu_plugin_vcpu_simple_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void* userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb* tb);
typedef void (*qemu_plugin_vcpu_syscall_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index,
                                              int64_t num, uint64_t a1, uint64_t a2, uint64_t a3,
                                              uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7,
                                              uint64_t a8);
typedef void (*qemu_plugin_vcpu_syscall_ret_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_idx,
                                                  int64_t num, int64_t ret);

// Entry point: called once after loading; argv holds the "NAME=VALUE" options given after the
// plugin's path (-plugin FILE,NAME=VALUE,...). Non-zero refuses the plugin (QEMU exits).
int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t* info, int argc, char** argv);

// A vCPU (in qemu-user: a guest thread) is created / ends.
void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
void qemu_plugin_register_vcpu_exit_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
// A translation block was translated; its exec/insn callbacks are registered from here.
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
// Called each time the block `tb` starts executing.
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb* tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void* userdata);
// Called each time the instruction `insn` starts executing.
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn* insn,
                                            qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void* userdata);
// System calls: before (number and arguments) and after (number and result, -errno on
// failure) the emulator runs them.
void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_syscall_cb_t cb);
void qemu_plugin_register_vcpu_syscall_ret_cb(qemu_plugin_id_t id,
                                              qemu_plugin_vcpu_syscall_ret_cb_t cb);
// Called when the emulator exits (after the last guest instruction).
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void* userdata);

// A translation block: number of instructions, guest address of the first, one instruction.
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb* tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb* tb);
struct qemu_plugin_insn* qemu_plugin_tb_get_insn(const struct qemu_plugin_tb* tb, size_t idx);
// An instruction: its bytes, length and guest address.
const void* qemu_plugin_insn_data(const struct qemu_plugin_insn* insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn* insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn* insn);

// The path of the guest program, allocated (free() it); NULL in system emulation.
const char* qemu_plugin_path_to_binary(void);

// Writes a string to QEMU's log (stderr unless -D FILE).
void qemu_plugin_outs(const char* string);

}  // extern "C"

#endif  // PTKIT_QEMU_PLUGIN_QEMU_PLUGIN_API_H_
