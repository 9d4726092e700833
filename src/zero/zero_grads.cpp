// ZeroEngine's GradSink half: gradient buffers, their reduction as each
// unit's backward ends, the landing on the host ([Note: gradients on the
// host]) and the device's sums of squares ([Note: norm on the device]).
// The ParamProvider half and the states are in zero_engine.cpp.
#include "zero/zero_engine.hpp"

#include <algorithm>

namespace zt {

void ZeroEngine::ensure_grad_buffer(int u) {
  UnitState& st = state_[u];
  if (!st.reduce.empty()) {  // last micro-batch's reduction still reads it
    finish_all(st.reduce);
    st.grad.reset();
  }
  if (st.grad.empty()) {
    st.grad = Buffer(dev_, DType::f32, Shape{layout_.unit(u).padded}, MemTag::grads);
    dev_.memset_zero(st.grad.data(), st.grad.bytes());
  }
}

std::vector<Tensor> ZeroEngine::grads(int unit) {
  std::vector<int> needed{unit};
  for (const TiedParam& t : units_[unit]->tied()) needed.push_back(t.unit);
  auto view = [&](int u, int p) {
    const FlatUnit& fu = layout_.unit(u);
    const ParamSlot& slot = fu.params[p];
    ZT_CHECK(is_local(u), "gradients of unit ", u, " asked on a rank that does not hold it");
    float* base = opts_.stage <= 1 ? grads_.as<float>() + grad_offset_[u] : state_[u].grad.as<float>();
    return Tensor(base + slot.offset, DType::f32, slot.shape, dev_.kind());
  };
  if (!awaited_all_) {
    // [Note: streamed update] The last update read the gradient shards
    // this backward writes: it is done (every unit went forward) or ends now.
    awaited_all_ = true;
    for (int u = 0; u < layout_.num_units(); ++u)
      if (is_local(u)) await_update(u);
  }
  if (opts_.stage >= 2)
    for (int u : needed) ensure_grad_buffer(u);
  std::vector<Tensor> views;
  for (int p = 0; p < static_cast<int>(layout_.unit(unit).params.size()); ++p) views.push_back(view(unit, p));
  for (const TiedParam& t : units_[unit]->tied()) views.push_back(view(t.unit, t.param));
  return views;
}

bool ZeroEngine::grads_fresh(int unit) {
  return overwrite_first_ && !grads_written_[static_cast<size_t>(unit)];
}

void ZeroEngine::done(int unit) {
  if (overwrite_first_) grads_written_[static_cast<size_t>(unit)] = true;
  if (opts_.stage < 2) return;
  // [Note: breadth-first walk]: the run's next micro-batch adds into the
  // same buffer; its last one reduces the sum.
  if (more_in_run(unit, kRunDone)) return;
  UnitState& st = state_[unit];
  const FlatUnit& fu = layout_.unit(unit);
  if (!grad_acc_.empty()) {
    // offload.grad_accumulation "device": micro-batches before the last add
    // into the device accumulator; the last lands the sum on the host.
    float* acc = grad_acc_.as<float>() + shard_offset_[unit];
    const int64_t k = ++micro_done_[static_cast<size_t>(unit)];
    ZT_CHECK(k <= opts_.micro_batches, "unit ", unit, " reduced ", k, " times in a step of ", opts_.micro_batches,
             " micro-batches");
    if (k < opts_.micro_batches)
      reduce_scatter_unit(dp_, dev_, kernels_, st.grad.as<float>(), acc, fu.shard, opts_.reduce_bucket_size, st.reduce);
    else
      note_sq(unit, reduce_scatter_unit(dp_, dev_, kernels_, st.grad.as<float>(), shard_grad(unit), fu.shard,
                                        opts_.reduce_bucket_size, st.reduce, landing_.get(), acc, sq_slot(unit),
                                        nullptr, shard_grad_dtype()));
  } else {
    // [Note: norm on the device] Only a step's single landing is the
    // gradient (one run of all the micro-batches, or no accumulation); a
    // later landing is added on the host, which sums the squares it leaves.
    const bool once = run_length_ == opts_.micro_batches;
    const size_t i = static_cast<size_t>(unit);
    double* host_sq = !once && landing_ && landed_[i] ? &host_sq_[i] : nullptr;
    note_sq(unit,
            reduce_scatter_unit(dp_, dev_, kernels_, st.grad.as<float>(), shard_grad(unit), fu.shard,
                                opts_.reduce_bucket_size, st.reduce, landing_.get(), nullptr,
                                once ? sq_slot(unit) : nullptr, host_sq, shard_grad_dtype()),
            host_sq != nullptr);
  }
  // Pieces packed through staging finish at once; a whole-unit call may stay
  // in flight with overlap_comm, holding the gradient buffer until it is done.
  // At most kMaxReducing units stay in flight (the estimator's count): a GPU
  // runs far ahead of the host's completion checks, and every unit of the
  // backward would otherwise keep its fp32 gradient buffer alive. Finishing
  // the oldest costs the host nothing there (the compute stream waits).
  // One rank's reduction is a copy queued on the compute stream: finished
  // at once, so its buffer is freed before the next unit's backward (as a
  // GPU's one-rank group completes at once anyway; the CPU's MPI request
  // might not yet, and the peak would then hold one more unit).
  if (!opts_.overlap_comm || st.reduce.empty() || dp_.size() == 1) {
    finish_all(st.reduce);
    st.grad.reset();
  } else {
    reducing_.push_back(unit);
    progress_reductions(false);
    reducing_.erase(std::remove_if(reducing_.begin(), reducing_.end(), [&](int u) { return state_[u].reduce.empty(); }),
                    reducing_.end());
    while (static_cast<int>(reducing_.size()) > kMaxReducing) {
      UnitState& oldest = state_[reducing_.front()];
      finish_all(oldest.reduce);
      oldest.grad.reset();
      reducing_.erase(reducing_.begin());
    }
  }
}

void ZeroEngine::progress_reductions(bool wait_all) {
  if (wait_all) reducing_.clear();
  for (UnitState& st : state_) {
    if (st.reduce.empty()) continue;
    bool complete = true;
    if (!wait_all)
      for (PendingCollective& p : st.reduce) complete = complete && p.request->test();
    if (!complete) continue;
    finish_all(st.reduce);
    st.grad.reset();
  }
}

void ZeroEngine::zero_grads() {
  if (!grads_.empty()) {
    if (overwrite_first_) {
      // [Note: gradients written, not zeroed]
      for (const Kernels::ZeroSpan& s : clear_large_)
        dev_.memset_zero(grads_.as<float>() + s.begin, static_cast<size_t>(s.end - s.begin) * sizeof(float));
      kernels_.zero_spans(grads_.tensor(), clear_small_);
      std::fill(grads_written_.begin(), grads_written_.end(), false);
    } else {
      dev_.memset_zero(grads_.data(), grads_.bytes());
    }
  }
  if (!landing_) {
    if (!grad_shard_.empty()) dev_.memset_zero(grad_shard_.data(), grad_shard_.bytes());
    return;
  }
  // [Note: gradients on the host] The first piece of each element is copied
  // over whatever the shard held, so nothing is zeroed. With two buffers,
  // the step's gradients go to the other one (an update may still read the
  // last step's).
  landing_->begin_step();
  dev_.memset_zero(shard_sq_.data(), shard_sq_.bytes());
  std::fill(sq_on_device_.begin(), sq_on_device_.end(), false);
  std::fill(sq_on_host_.begin(), sq_on_host_.end(), false);
  std::fill(landed_.begin(), landed_.end(), false);
  if (!grad_acc_.empty()) {
    dev_.memset_zero(grad_acc_.data(), grad_acc_.bytes());
    std::fill(micro_done_.begin(), micro_done_.end(), 0);
  }
  if (grad_shard_alt_.empty()) return;
  std::swap(grad_shard_, grad_shard_alt_);
  for (OwnedShard& s : owned_) s.grad = shard_grad(s.unit);
}

void ZeroEngine::reduce_gradients() {
  if (opts_.stage == 0) {
    if (dp_.size() == 1) return;
    const int64_t n = grads_.tensor().numel();
    std::vector<CommRequest> pending;
    for (int64_t b = 0; b < n; b += opts_.reduce_bucket_size) {
      const int64_t len = std::min(opts_.reduce_bucket_size, n - b);
      pending.push_back(dp_.all_reduce(grads_.tensor().slice1d(b, len), ReduceOp::sum));
    }
    for (CommRequest& r : pending) wait(r);
  } else if (opts_.stage == 1) {
    std::vector<PendingCollective> pending;
    for (int u = 0; u < layout_.num_units(); ++u) {
      if (!is_local(u)) continue;
      const FlatUnit& fu = layout_.unit(u);
      note_sq(u, reduce_scatter_unit(dp_, dev_, kernels_, grads_.as<float>() + grad_offset_[u], shard_grad(u),
                                     fu.shard, opts_.reduce_bucket_size, pending, landing_.get(), nullptr, sq_slot(u),
                                     nullptr, shard_grad_dtype()));
    }
    finish_all(pending);
  } else {
    progress_reductions(true);
  }
  if (landing_) {
    landing_->drain();
    // Every owned element has its gradient: a unit whose reduction never
    // landed would leave an earlier step's values in the shard.
    ZT_CHECK(landing_->first_landed() == shard_elems_, "gradients on the host: ", landing_->first_landed(), " of ",
             shard_elems_, " owned elements landed this step");
  }
}

// Unit u's owned gradient shard in grad_shard_ (fp32 on the device, fp32 or
// bf16 on the host), and that dtype.
void* ZeroEngine::shard_grad(int u) {
  return grad_shard_.as<char>() + static_cast<size_t>(shard_offset_[u]) * dtype_size(shard_grad_dtype());
}
DType ZeroEngine::shard_grad_dtype() const { return grad_shard_.tensor().dtype; }

// [Note: norm on the device] Slots by unit.
double* ZeroEngine::sq_slot(int u) { return shard_sq_.empty() ? nullptr : shard_sq_.as<double>() + u; }

// A unit that lands a second time in a step is added on the host: its
// device sum (of one piece) no longer holds, and the add's own sum, when it
// took one (`on_host`), does, until a later landing.
void ZeroEngine::note_sq(int u, bool summed, bool on_host) {
  if (sq_on_device_.empty()) return;
  const size_t i = static_cast<size_t>(u);
  sq_on_device_[i] = summed && !on_host && !landed_[i];
  sq_on_host_[i] = summed && on_host;
  landed_[i] = true;
}

void ZeroEngine::forget_landed_sq(int unit) {
  if (sq_on_device_.empty()) return;
  sq_on_device_[static_cast<size_t>(unit)] = false;
  sq_on_host_[static_cast<size_t>(unit)] = false;
}

bool ZeroEngine::landed_shard_sq(std::vector<double>& sq, std::vector<bool>& have) {
  have.assign(owned_.size(), false);
  if (shard_sq_.empty()) return false;
  std::vector<double> by_unit(static_cast<size_t>(layout_.num_units()));
  dev_.copy_to_host(by_unit.data(), shard_sq_.data(), by_unit.size() * sizeof(double));
  sq.assign(owned_.size(), 0.0);
  bool any = false;
  for (const OwnedShard& sh : owned_) {
    const size_t i = static_cast<size_t>(sh.index), u = static_cast<size_t>(sh.unit);
    have[i] = sq_on_device_[u] || sq_on_host_[u];
    sq[i] = sq_on_host_[u] ? host_sq_[u] : by_unit[u];
    any = any || have[i];
  }
  return any;
}

}  // namespace zt
