// Futex doorbells over shared memory (process-shared futexes).
//
// Protocol (both sides of a ring follow it):
//   Ringer: 1. publish the data (release store of the ring index)
//           2. full fence
//           3. if doorbell.waiters != 0: doorbell.seq += 1, FUTEX_WAKE all
//   Sleeper: 1. s = doorbell.seq
//            2. doorbell.waiters += 1, full fence
//            3. re-check the ring; if nothing new, FUTEX_WAIT(seq, s, timeout)
//            4. doorbell.waiters -= 1
// The fences make "ringer saw no waiter" and "sleeper saw no data" exclusive,
// so no wake-up is lost and an idle ring costs no system call.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/kolo/abi/shm_abi_v1.h"

namespace kolo {

// Sleeps while *word == expected, at most `timeout`. Returns on a wake-up, a
// value change, a signal or the timeout; callers re-check their condition.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout);
void FutexWakeAll(std::atomic<uint32_t>* word);

// Step 3 of the ringer.
inline void RingDoorbell(abi::v1::Doorbell* bell) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell->waiters.load(std::memory_order_relaxed) != 0) {
    bell->seq.fetch_add(1, std::memory_order_release);
    FutexWakeAll(&bell->seq);
  }
}

// Steps 1-4 of the sleeper. `ready` is re-checked after announcing.
// Polls for `spin` first (0 for none) since a wake-up costs several µs; the
// poll yields the core between checks, so on a machine with fewer cores than
// busy threads the thread it waits for still gets to run.
template <typename Ready>
void SleepOnDoorbell(abi::v1::Doorbell* bell, Ready ready, absl::Duration timeout,
                     absl::Duration spin) {
  if (spin > absl::ZeroDuration()) {
    absl::Time spin_until = absl::Now() + spin;
    do {
      for (int i = 0; i < 16; ++i) {
        if (ready()) return;
        __builtin_ia32_pause();
      }
      sched_yield();
    } while (absl::Now() < spin_until);
  }
  uint32_t seq = bell->seq.load(std::memory_order_acquire);
  bell->waiters.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!ready()) FutexWait(&bell->seq, seq, timeout);
  bell->waiters.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace kolo
