// A FIFO of work requests in a power-of-two circular buffer that grows by doubling and never
// shrinks: once a queue has reached its working depth, push and pop touch no allocator.
//
// Why not std::deque: its blocks are 512 bytes, and a send entry (~600 bytes: 16 SGEs and the
// inline-data area) or a receive WQE (~270 bytes) fills one block alone, so every post paid a
// malloc and every completion a free (bench/path_bench: ~5% of a 64-byte WRITE's cost). Growing
// rather than reserving max_send_wr entries up front keeps 10000 idle QPs small.
//
// Elements are copied in and stay constructed in the buffer (pop_front does not destroy): for the
// trivially copyable WQE types it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <vector>

namespace uroce::transport {

template <typename T>
class Ring {
  static_assert(std::is_trivially_copyable_v<T>, "Ring keeps popped elements constructed");

 public:
  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  T& front() { return buf_[head_ & mask_]; }
  const T& front() const { return buf_[head_ & mask_]; }
  T& back() { return buf_[(tail_ - 1) & mask_]; }
  const T& back() const { return buf_[(tail_ - 1) & mask_]; }
  // The i-th element from the front (i < size()).
  T& operator[](size_t i) { return buf_[(head_ + i) & mask_]; }
  const T& operator[](size_t i) const { return buf_[(head_ + i) & mask_]; }

  void push_back(const T& v) { push_slot() = v; }
  // Appends an element and returns it as the buffer holds it (a popped element's old bytes):
  // the caller writes every field it needs, and no more than it needs.
  T& push_slot() {
    if (size() == buf_.size()) grow();
    return buf_[tail_++ & mask_];
  }
  void pop_front() { ++head_; }
  void clear() { head_ = tail_ = 0; }

  template <typename R, typename V>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = V*;
    using reference = V&;
    Iter() = default;
    Iter(R* r, size_t i) : r_(r), i_(i) {}
    V& operator*() const { return (*r_)[i_]; }
    V* operator->() const { return &(*r_)[i_]; }
    Iter& operator++() {
      ++i_;
      return *this;
    }
    Iter operator++(int) {
      Iter t = *this;
      ++i_;
      return t;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }

   private:
    R* r_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = Iter<Ring, T>;
  using const_iterator = Iter<const Ring, const T>;
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size()}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

 private:
  void grow() {
    const size_t n = size();
    std::vector<T> bigger(buf_.empty() ? kFirstCapacity : buf_.size() * 2);
    for (size_t i = 0; i < n; ++i) bigger[i] = (*this)[i];
    buf_.swap(bigger);
    mask_ = buf_.size() - 1;
    head_ = 0;
    tail_ = n;
  }

  static constexpr size_t kFirstCapacity = 4;
  std::vector<T> buf_;
  size_t mask_ = 0;
  // Free-running positions; buf_[pos & mask_] holds the element. head_ <= tail_.
  uint64_t head_ = 0, tail_ = 0;
};

}  // namespace uroce::transport
