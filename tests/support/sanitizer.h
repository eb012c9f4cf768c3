// Whether the test runs under AddressSanitizer (the fuzz preset's sanitizer build of the unit
// tests, scripts/test.sh): a test that repeats one check over many generated inputs takes fewer
// of them there, where each costs several times as much, and a memory bound allows ASan's own.
#ifndef PTKIT_TESTS_SUPPORT_SANITIZER_H_
#define PTKIT_TESTS_SUPPORT_SANITIZER_H_

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PTKIT_TESTS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(PTKIT_TESTS_ASAN)
#define PTKIT_TESTS_ASAN 1
#endif

namespace ptkit::testing {

#ifdef PTKIT_TESTS_ASAN
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace ptkit::testing

#endif  // PTKIT_TESTS_SUPPORT_SANITIZER_H_
