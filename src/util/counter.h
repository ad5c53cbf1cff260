// One statistics counter: a 64-bit value with one writer at a time (the owner serialises writers,
// e.g. under the device lock) and any number of lock-free readers. Shared by the engine's and the
// ports' counter lists.
#pragma once

#include <atomic>
#include <cstdint>

namespace uroce {

class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;  // slot_ may point at own_
  Counter& operator=(const Counter&) = delete;

  void add(uint64_t n = 1) {
    std::atomic_ref<uint64_t> v(*slot_);
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get() const { return std::atomic_ref<uint64_t>(*slot_).load(std::memory_order_relaxed); }

  // Moves the value's storage to `slot` (8-byte aligned), carrying the value over: a device puts
  // its counters in the shared-memory file the `uroce` command reads (engine/stats_shm.h), so
  // readers see them live without any copying. Call before any other thread uses the counter;
  // `slot` must outlive every later use of it.
  void bind(uint64_t* slot) {
    *slot = get();
    slot_ = slot;
  }

 private:
  alignas(std::atomic_ref<uint64_t>::required_alignment) uint64_t own_ = 0;
  uint64_t* slot_ = &own_;
};

}  // namespace uroce
