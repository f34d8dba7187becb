// The sanitizers' suppressions for .bazelrc's --config=asan and --config=tsan, linked into every
// binary and test of those builds (--custom_malloc=//bazel:sanitizer_suppressions). Only for
// Debian's libraries, which are not instrumented; a finding in mailroom's own code is fixed,
// never listed here. Each entry is one line of the sanitizers' suppression format, its reason
// above it.

// NOLINTNEXTLINE(bugprone-reserved-identifier): the name LeakSanitizer looks up
extern "C" const char* __lsan_default_suppressions() {
  return
      // libpq's memory (a PGresult) that libpqxx 6.4 loses when a statement runs on a
      // connection the server has closed (a listener's ping after pg_terminate_backend). A leak
      // of mailroom's own objects holding libpq's memory is still reported: its allocation is
      // in mailroom's code.
      "leak:libpq.so.5\n";
}
