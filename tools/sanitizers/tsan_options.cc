// ThreadSanitizer's options for every binary linked under --config=tsan.
// They are built in rather than only set in the tests' environment because
// some tests start kolod with a cleaned environment (as systemd or a
// container would); TSAN_OPTIONS from the environment still applies after
// these. Why each option: docs/sanitizers.md.
//
// Thread-safety: returns a constant.

// The sanitizer runtime looks this function up by name (C linkage).
extern "C" const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1:history_size=4:ignore_noninstrumented_modules=1";
}
