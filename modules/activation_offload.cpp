#include "modules/activation_offload.hpp"

#include "core/error.hpp"

namespace zt {

bool offloads_output(const std::vector<bool>& recomputed, int u, bool chunk_last) {
  const size_t i = static_cast<size_t>(u);
  return !chunk_last && i + 1 < recomputed.size() && recomputed[i] && recomputed[i + 1];
}

ActivationOffload::ActivationOffload(Device& dev)
    : dev_(dev), host_(dev.host_memory(true)), queue_(dev.make_transfer_queue()) {
  ZT_CHECK(queue_ != nullptr, "activation offload: the ", dev.name(), " device has no transfer queue");
}

size_t ActivationOffload::slot_bytes_total() const {
  size_t total = 0;
  for (const Slot& s : slots_) total += s.buf.bytes();
  return total;
}

int ActivationOffload::take(size_t bytes) {
  // The slot freed longest ago, of this size, when more than kSlack are free.
  auto oldest = free_.end();
  int seen = 0;
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (slots_[static_cast<size_t>(*it)].buf.bytes() == bytes && seen++ == 0) oldest = it;
  if (seen <= kSlack) {
    slots_.push_back(Slot{Buffer(dev_, bytes, MemTag::activations), {}});
    return static_cast<int>(slots_.size()) - 1;
  }
  const int i = *oldest;
  free_.erase(oldest);
  Slot& s = slots_[static_cast<size_t>(i)];
  queue_->compute_waits(s.pending);  // written by the compute stream (or a copy ordered after it)
  s.pending = {};
  return i;
}

void ActivationOffload::give_back(int slot, TransferTicket pending) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  // The CPU's copies are done at once: nothing reads the slot any more.
  if (dev_.kind() == DeviceKind::cpu) dev_.memset_zero(s.buf.data(), s.buf.bytes());
  s.pending = pending;
  free_.push_back(slot);
}

TransferTicket ActivationOffload::issued(TransferTicket t) {
  issued_.push_back(t);
  while (issued_.size() > kRetireAfter) {
    queue_->wait(issued_.front());
    issued_.pop_front();
  }
  return t;
}

Tensor ActivationOffload::view(const SwappedActivation& s) const {
  return Tensor(slots_[static_cast<size_t>(s.slot)].buf.data(), s.dtype, s.shape, dev_.kind());
}

Tensor ActivationOffload::place(SwappedActivation& s, DType dtype, Shape shape) {
  ZT_CHECK(s.where == SwappedActivation::Where::none, "activation offload: an output placed twice");
  s.dtype = dtype;
  s.shape = shape;
  s.slot = take(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  s.where = SwappedActivation::Where::device;
  return view(s);
}

void ActivationOffload::evict(SwappedActivation& s) {
  ZT_CHECK(s.where == SwappedActivation::Where::device, "activation offload: evicting an output not on the device");
  const size_t bytes = static_cast<size_t>(s.shape.numel()) * dtype_size(s.dtype);
  if (s.host.bytes() != bytes) s.host = Buffer(host_, bytes, MemTag::activations);
  // The host buffer's last reader is a copy back that the compute stream
  // waited for before the work queued since, so the mark orders after it too.
  s.copy = issued(queue_->to_host(s.host.data(), slots_[static_cast<size_t>(s.slot)].buf.data(), bytes,
                                  queue_->mark_compute()));
  give_back(s.slot, s.copy);
  s.slot = -1;
  s.where = SwappedActivation::Where::on_host;
}

void ActivationOffload::prefetch(SwappedActivation& s) {
  if (s.where != SwappedActivation::Where::on_host) return;
  const size_t bytes = s.host.bytes();
  // Copies in the two directions run on two streams: the compute stream
  // waits for the copy out before the mark that the copy back follows.
  queue_->compute_waits(s.copy);
  s.slot = take(bytes);
  s.copy = issued(queue_->to_device(slots_[static_cast<size_t>(s.slot)].buf.data(), s.host.data(), bytes,
                                    queue_->mark_compute()));
  s.where = SwappedActivation::Where::to_device;
}

Tensor ActivationOffload::fetch(SwappedActivation& s) {
  prefetch(s);
  if (s.where == SwappedActivation::Where::to_device) {
    queue_->compute_waits(s.copy);
    s.where = SwappedActivation::Where::device;
  }
  ZT_CHECK(s.where == SwappedActivation::Where::device, "activation offload: fetching an output never placed");
  return view(s);
}

void ActivationOffload::drop(SwappedActivation& s) {
  switch (s.where) {
    case SwappedActivation::Where::none:
    case SwappedActivation::Where::on_host: break;
    case SwappedActivation::Where::to_device:
      // Its copy writes the slot: the slot's next writer waits for it.
      give_back(s.slot, s.copy);
      break;
    case SwappedActivation::Where::device: give_back(s.slot, {}); break;
  }
  s.slot = -1;
  s.where = SwappedActivation::Where::none;
}

}  // namespace zt
