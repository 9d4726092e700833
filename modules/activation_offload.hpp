// ActivationOffload: checkpoints kept in host memory between a micro-batch's
// forward and its backward (DeepSpeed's activation_checkpointing.
// cpu_checkpointing).
//
// [Note: activation offload] With activation checkpointing a recomputed unit
// keeps only its input for the backward: the previous unit's output, which
// [Note: micro-batch memory] (runner.hpp) keeps in the micro-batch's `saved`
// arena. With this offload, the output of a recomputed unit whose next unit
// is recomputed too (every transformer block but the last) goes instead into
// a device slot of a pool kept here:
//   - forward: once the next unit's forward is queued (its only reader), the
//     slot is copied to a page-locked host buffer of the micro-batch
//     (evict), on the transfer queue's device-to-host stream, after the
//     compute stream's work so far; the slot goes back to the pool with that
//     copy pending;
//   - backward: before the next unit's recomputation reads it, it is copied
//     back into a slot (fetch) and the compute stream waits for that copy;
//     the unit's backward queues the fetch of the input of the unit below, so
//     the copy runs under this unit's compute; after the backward the slot
//     goes back to the pool (drop).
// A slot taken from the pool is written again only after its pending copy
// (the compute stream waits for it), and the pool hands out the slot freed
// longest ago, keeping kSlack freed slots back, so that the copy has had the
// compute of a few units to finish: with G micro-batches walked unit by unit
// (a breadth-first group) the pool holds G + 1 + kSlack slots of a unit's
// output, and 2 + kSlack where one micro-batch's range runs at a time (a
// pipeline stage): the estimator's figures. A pipeline chunk's last output
// goes to the next stage and is not offloaded.
// The values are copied, never changed, so the run's bits are those without
// the offload. On the CPU backend the copies are memcpy into distinct host
// buffers, so the path runs and is tested without a GPU, and a slot is
// zeroed as it goes back to the pool, so that a reader still holding its old
// address reads zeros and the tests' bits differ.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/transfer.hpp"

namespace zt {

// One micro-batch's copy of one unit's output, by the index of the unit that
// reads it (MicroBatchState::swaps).
struct SwappedActivation {
  enum class Where { none, device, on_host, to_device };
  Where where = Where::none;
  int slot = -1;          // the device slot while on the device or copying
  Buffer host;            // kept for the next steps
  TransferTicket copy;    // the last copy queued for it
  DType dtype = DType::f32;
  Shape shape;
};

// [Note: activation offload]: whether unit u's output waits in host memory:
// u and the unit after it are both recomputed (recomputed[i] per unit of
// the model), and u is not the last unit of its pipeline chunk, whose
// output goes to the next stage. The runner and the memory estimator both
// ask this.
bool offloads_output(const std::vector<bool>& recomputed, int u, bool chunk_last);

class ActivationOffload {
 public:
  // Freed slots held back before reuse ([Note: activation offload]).
  static constexpr int kSlack = 2;
  explicit ActivationOffload(Device& dev);
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // A device slot for `s` (Where::none), of dtype x shape: the tensor the
  // forward writes the unit's output into.
  Tensor place(SwappedActivation& s, DType dtype, Shape shape);
  // The forward of its reader is queued: copy it to the host and give the
  // slot back.
  void evict(SwappedActivation& s);
  // Queue its copy back to a device slot (on_host), without making the
  // compute stream wait; a no-op when on the device already or coming.
  void prefetch(SwappedActivation& s);
  // Its tensor on the device, the compute stream ordered after its copy.
  Tensor fetch(SwappedActivation& s);
  // The backward of its reader is queued: the slot goes back to the pool
  // (Where::none). Also for a micro-batch abandoned or reset mid-way.
  void drop(SwappedActivation& s);

  // The host waits for every copy queued (before a micro-batch's host
  // buffers are freed or reused with copies of it still in flight).
  void wait_all() { queue_->wait_all(); }
  // Slots made so far (the pool's high-water mark) and their bytes.
  int slots() const { return static_cast<int>(slots_.size()); }
  size_t slot_bytes_total() const;

 private:
  struct Slot {
    Buffer buf;
    TransferTicket pending;  // a copy out of it that must end before it is written
  };
  int take(size_t bytes);
  void give_back(int slot, TransferTicket pending);
  // Every copy's ticket: the host waits for the oldest beyond kRetireAfter
  // (done long since, in practice), so the queue's record of copies stays
  // short.
  static constexpr size_t kRetireAfter = 256;
  TransferTicket issued(TransferTicket t);
  Tensor view(const SwappedActivation& s) const;

  Device& dev_;
  Device& host_;
  std::vector<Slot> slots_;
  std::deque<int> free_;  // freed, oldest first
  std::deque<TransferTicket> issued_;
  // Last, so that it is destroyed first: its destructor waits for the copies
  // that may still read or write the slots.
  std::unique_ptr<TransferQueue> queue_;
};

}  // namespace zt
