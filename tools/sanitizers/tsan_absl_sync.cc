// Tells ThreadSanitizer about the happens-before edges that absl::Mutex,
// absl::CondVar and absl::Notification create. Linked only under
// --config=tsan (through //third_party:absl), never into a shipped binary.
//
// Why: Kolo links the system's abseil, which is not built with TSan. Its
// mutex is made of futexes and atomics TSan does not see, so without help
// TSan reports every field guarded by an absl::Mutex as a race. This file
// defines the out-of-line entry points of those classes (the declarations
// come from abseil's own headers, so the symbols are exactly the library's).
// The executable's definitions take precedence over the shared library's,
// for Kolo's calls and for the library's own calls through its PLT. Each
// definition forwards to the library's function, found with
// dlsym(RTLD_NEXT), and around it reports to TSan:
//
//   1. Taking a lock (Lock, TryLock that succeeds, ReaderLock, LockWhen...):
//      acquire on the mutex's address after the real call returns.
//   2. Letting go (Unlock, ReaderUnlock): release on that address before
//      the real call, so the next owner sees everything done under it.
//   3. Waiting (Await*, CondVar::Wait*): release before, acquire after; the
//      real call lets go of the lock and takes it back inside.
//   4. Conditions: abseil evaluates a waiter's Condition on whichever thread
//      holds the lock at that moment, often another thread inside its
//      Unlock. The condition is wrapped so that its evaluation is itself
//      bracketed by acquire and release on the mutex.
//   5. Notification: Notify releases on the object; a wait that returns
//      true acquires on it. (HasBeenNotified is inline in the header and
//      not covered; Kolo does not use it.)
//
// This models every absl::Mutex as a plain happens-before edge, not as a
// lock: TSan's lock-order (deadlock) reports do not cover absl::Mutex.
//
// Thread-safety: every function here is safe from any thread; the table of
// real entry points is built once, on first use, and never changes.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "absl/base/config.h"
#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace kolo::sanitizers {
namespace {

#define KOLO_TSAN_STR_INNER(x) #x
#define KOLO_TSAN_STR(x) KOLO_TSAN_STR_INNER(x)
#if ABSL_OPTION_USE_INLINE_NAMESPACE
constexpr char kInlineNamespace[] = KOLO_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
#else
constexpr char kInlineNamespace[] = "";
#endif

// The mangled name of an abseil member function: `prefix` is "_ZN" or
// "_ZNK" (const member), `rest` the part after the inline namespace.
std::string Mangled(const char* prefix, const char* rest) {
  const std::string ns = kInlineNamespace;
  std::string name = prefix;
  name += "4absl";
  if (!ns.empty()) name += std::to_string(ns.size()) + ns;
  return name + rest;
}

template <class Fn>
Fn Real(const char* prefix, const char* rest) {
  const std::string name = Mangled(prefix, rest);
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: abseil has no %s\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// The library's entry points, each named by its mangled suffix.
struct RealEntryPoints {
  using MutexFn = void (*)(Mutex*);
  using MutexTryFn = bool (*)(Mutex*);
  using CondFn = void (*)(Mutex*, const Condition&);
  using CondTimeoutFn = bool (*)(Mutex*, const Condition&, Duration);
  using CondDeadlineFn = bool (*)(Mutex*, const Condition&, Time);
  using CvWaitFn = void (*)(CondVar*, Mutex*);
  using CvTimeoutFn = bool (*)(CondVar*, Mutex*, Duration);
  using CvDeadlineFn = bool (*)(CondVar*, Mutex*, Time);
  using NotifyFn = void (*)(Notification*);
  using WaitFn = void (*)(const Notification*);
  using WaitTimeoutFn = bool (*)(const Notification*, Duration);
  using WaitDeadlineFn = bool (*)(const Notification*, Time);

  MutexFn lock = Real<MutexFn>("_ZN", "5Mutex4LockEv");
  MutexFn unlock = Real<MutexFn>("_ZN", "5Mutex6UnlockEv");
  MutexTryFn try_lock = Real<MutexTryFn>("_ZN", "5Mutex7TryLockEv");
  MutexFn reader_lock = Real<MutexFn>("_ZN", "5Mutex10ReaderLockEv");
  MutexFn reader_unlock = Real<MutexFn>("_ZN", "5Mutex12ReaderUnlockEv");
  MutexTryFn reader_try_lock = Real<MutexTryFn>("_ZN", "5Mutex13ReaderTryLockEv");
  CondFn await = Real<CondFn>("_ZN", "5Mutex5AwaitERKNS0_9ConditionE");
  CondTimeoutFn await_timeout =
      Real<CondTimeoutFn>("_ZN", "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  CondDeadlineFn await_deadline =
      Real<CondDeadlineFn>("_ZN", "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  CondFn lock_when = Real<CondFn>("_ZN", "5Mutex8LockWhenERKNS0_9ConditionE");
  CondTimeoutFn lock_when_timeout =
      Real<CondTimeoutFn>("_ZN", "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  CondDeadlineFn lock_when_deadline =
      Real<CondDeadlineFn>("_ZN", "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  CondFn reader_lock_when = Real<CondFn>("_ZN", "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  CondTimeoutFn reader_lock_when_timeout = Real<CondTimeoutFn>(
      "_ZN", "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  CondDeadlineFn reader_lock_when_deadline =
      Real<CondDeadlineFn>("_ZN", "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  CvWaitFn cv_wait = Real<CvWaitFn>("_ZN", "7CondVar4WaitEPNS0_5MutexE");
  CvTimeoutFn cv_wait_timeout =
      Real<CvTimeoutFn>("_ZN", "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  CvDeadlineFn cv_wait_deadline =
      Real<CvDeadlineFn>("_ZN", "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  NotifyFn notify = Real<NotifyFn>("_ZN", "12Notification6NotifyEv");
  WaitFn wait = Real<WaitFn>("_ZNK", "12Notification19WaitForNotificationEv");
  WaitTimeoutFn wait_timeout =
      Real<WaitTimeoutFn>("_ZNK", "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  WaitDeadlineFn wait_deadline =
      Real<WaitDeadlineFn>("_ZNK", "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
};

const RealEntryPoints& Lib() {
  static const RealEntryPoints lib;
  return lib;
}

// Point 4: a Condition that brackets the caller's with acquire and release
// on `mu`, whichever thread evaluates it.
class TracedCondition {
 public:
  TracedCondition(const Condition& inner, Mutex* mu) : inner_(inner), mu_(mu) {}
  Condition Get() { return Condition(&TracedCondition::Eval, this); }
  // Makes the object itself visible to whichever thread evaluates it: it
  // lives on the waiter's stack, and another thread reads it (unlocking the
  // mutex, absl evaluates the waiters' conditions) before any acquire on the
  // mutex could order that read after the waiter wrote it.
  void Publish() { __tsan_release(this); }

 private:
  static bool Eval(void* self) {
    __tsan_acquire(self);
    auto* traced = static_cast<TracedCondition*>(self);
    __tsan_acquire(traced->mu_);
    const bool result = traced->inner_.Eval();
    __tsan_release(traced->mu_);
    return result;
  }

  const Condition& inner_;
  Mutex* const mu_;
};

// Points 1, 3 and 4 for the calls that take a Condition: runs `real` (the
// library's function) on `mu` with the traced condition. `held_on_entry`
// says whether the caller holds the lock (Await*); every one of these
// returns with the lock held, also on timeout.
template <class Real, class... Args>
auto OnCondition(Mutex* mu, const Condition& cond, bool held_on_entry, Real real, Args... args) {
  TracedCondition traced(cond, mu);
  traced.Publish();
  if (held_on_entry) __tsan_release(mu);
  if constexpr (std::is_void_v<decltype(real(mu, traced.Get(), args...))>) {
    real(mu, traced.Get(), args...);
    __tsan_acquire(mu);
  } else {
    const auto result = real(mu, traced.Get(), args...);
    __tsan_acquire(mu);
    return result;
  }
}

// Point 3 for CondVar: `real` lets go of `mu` and takes it back.
template <class Real, class... Args>
auto OnCondVar(CondVar* cv, Mutex* mu, Real real, Args... args) {
  __tsan_release(mu);
  if constexpr (std::is_void_v<decltype(real(cv, mu, args...))>) {
    real(cv, mu, args...);
    __tsan_acquire(mu);
  } else {
    const auto result = real(cv, mu, args...);
    __tsan_acquire(mu);
    return result;
  }
}

// Point 5: a wait that saw the notification acquires what Notify released.
bool Notified(const Notification* n, bool notified) {
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}

}  // namespace
}  // namespace kolo::sanitizers

// The definitions below replace the library's symbols (see the file comment).
namespace absl {
ABSL_NAMESPACE_BEGIN

using kolo::sanitizers::Lib;
using kolo::sanitizers::Notified;
using kolo::sanitizers::OnCondition;
using kolo::sanitizers::OnCondVar;

void Mutex::Lock() {
  Lib().lock(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  __tsan_release(this);
  Lib().unlock(this);
}

bool Mutex::TryLock() {
  const bool locked = Lib().try_lock(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderLock() {
  Lib().reader_lock(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  __tsan_release(this);
  Lib().reader_unlock(this);
}

bool Mutex::ReaderTryLock() {
  const bool locked = Lib().reader_try_lock(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Await(const Condition& cond) { OnCondition(this, cond, true, Lib().await); }

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  return OnCondition(this, cond, true, Lib().await_timeout, timeout);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  return OnCondition(this, cond, true, Lib().await_deadline, deadline);
}

void Mutex::LockWhen(const Condition& cond) { OnCondition(this, cond, false, Lib().lock_when); }

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  return OnCondition(this, cond, false, Lib().lock_when_timeout, timeout);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  return OnCondition(this, cond, false, Lib().lock_when_deadline, deadline);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  OnCondition(this, cond, false, Lib().reader_lock_when);
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  return OnCondition(this, cond, false, Lib().reader_lock_when_timeout, timeout);
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  return OnCondition(this, cond, false, Lib().reader_lock_when_deadline, deadline);
}

void CondVar::Wait(Mutex* mu) { OnCondVar(this, mu, Lib().cv_wait); }

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  return OnCondVar(this, mu, Lib().cv_wait_timeout, timeout);
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  return OnCondVar(this, mu, Lib().cv_wait_deadline, deadline);
}

void Notification::Notify() {
  __tsan_release(this);
  Lib().notify(this);
}

void Notification::WaitForNotification() const {
  Lib().wait(this);
  Notified(this, true);
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  return Notified(this, Lib().wait_timeout(this, timeout));
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  return Notified(this, Lib().wait_deadline(this, deadline));
}

ABSL_NAMESPACE_END
}  // namespace absl
