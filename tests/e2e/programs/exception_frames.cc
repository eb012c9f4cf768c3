// C++ exceptions that land in a lower frame of a recursion (sweep 30c F2): where gdb's stack
// has the frame that holds the try (or the destructor run), ptdecode's must too.
//   catch N:   parse(1) recurses to parse(N); parse(3) holds the try; parse(N) throws; the
//              catch calls caught(): gdb's stack at caught() is main;parse;parse;parse;caught.
//   cleanup N: every parse level has an object whose destructor calls cleaned(); parse(N)
//              throws, main catches: each cleaned() runs in its own level (main;parse x k;
//              ~Guard;cleaned for k = N..1).
//   loop N:    an interpreter's error loop: eval(3) loops N times over try { eval(4) } (which
//              recurses to eval(10) and throws): main;eval;eval;eval;report_error each time.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace {

int depth_limit = 10;
volatile int sink;

struct Error : std::exception {};

// A use of a call's result after it returns: the recursions stay recursions at -O2 (GCC makes
// `return f(d + 1) + 1` a loop).
int Keep(int v) {
  sink = v;
  return v + 1;
}

[[gnu::noinline]] void caught() { sink = sink + 1; }
[[gnu::noinline]] void cleaned() { sink = sink + 2; }
[[gnu::noinline]] void report_error() { sink = sink + 3; }

struct Guard {
  ~Guard() { cleaned(); }
};

[[gnu::noinline]] int parse(int d) {
  if (d == depth_limit) throw Error();
  if (d == 3) {
    try {
      return Keep(parse(d + 1));
    } catch (const Error&) {
      caught();
      return 0;
    }
  }
  return Keep(parse(d + 1));
}

[[gnu::noinline]] int parse_guarded(int d) {
  Guard g;
  if (d == depth_limit) throw Error();
  return Keep(parse_guarded(d + 1));
}

int eval_errors = 0;

[[gnu::noinline]] int eval(int d) {
  if (d == depth_limit) throw Error();
  if (d == 3) {
    int n = 0;
    for (int i = 0; i < eval_errors; ++i) {
      try {
        n += eval(d + 1);
      } catch (const Error&) {
        report_error();
      }
    }
    return n;
  }
  return Keep(eval(d + 1));
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "catch";
  const int n = argc > 2 ? std::atoi(argv[2]) : 10;
  if (std::strcmp(mode, "catch") == 0) {
    depth_limit = n;
    std::printf("%d\n", parse(1));
  } else if (std::strcmp(mode, "cleanup") == 0) {
    depth_limit = n;
    try {
      parse_guarded(1);
    } catch (const Error&) {
      std::printf("caught\n");
    }
  } else if (std::strcmp(mode, "loop") == 0) {
    eval_errors = n;
    std::printf("%d\n", eval(1));
  } else {
    return 2;
  }
  return 0;
}
