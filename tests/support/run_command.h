// Runs a program (fork + execv, no shell) and captures its exit code, stdout and stderr.
#ifndef PTKIT_TESTS_SUPPORT_RUN_COMMAND_H_
#define PTKIT_TESTS_SUPPORT_RUN_COMMAND_H_

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace ptkit::testing {

// Whether a command's standard error says it was denied a privilege it needs.
inline bool Denied(const std::string& err) {
  return err.find("Operation not permitted") != std::string::npos ||
         err.find("Permission denied") != std::string::npos;
}

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal (then `signal` says which)
  int signal = 0;
  std::string out;
  std::string err;
};

inline CommandResult RunCommand(const std::vector<std::string>& argv) {
  CommandResult r;
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return r;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(126);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_RUN_COMMAND_H_
