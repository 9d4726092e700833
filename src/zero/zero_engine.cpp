#include "zero/zero_engine.hpp"

#include <algorithm>
#include <cstring>

namespace zt {

ZeroEngine::ZeroEngine(const std::vector<const Unit*>& units, const ZeroOptions& opts, Device& dev, Kernels& kernels,
                       Communicator& dp, Communicator& host_dp, OptimizerPlacement& placement,
                       std::vector<bool> local)
    : local_(local.empty() ? std::vector<bool>(units.size(), true) : std::move(local)), units_(units), layout_(units, opts.stage == 0 ? 1 : dp.size()), opts_(opts), dev_(dev), kernels_(kernels),
      dp_(dp), host_dp_(host_dp), placement_(placement), states_on_device_(placement.states_on_device()),
      rank_(opts.stage == 0 ? 0 : dp.rank()) {
  ZT_CHECK(opts.stage >= 0 && opts.stage <= 3, "ZeRO stage ", opts.stage);
  ZT_CHECK(states_on_device_ || opts.stage >= 1, "the ", placement.name(),
           " optimizer placement keeps the states off the device, which needs ZeRO stage 1-3");
  if (opts.offload_params) {
    if (opts.stage != 3 || states_on_device_)
      ZT_USER_ERROR("zero_optimization.offload_param needs ZeRO stage 3 with offload_optimizer on \"cpu\" or "
                    "\"nvme\" (the parameters are refreshed where the optimizer runs); found stage ",
                    opts.stage, " with the optimizer on the ", placement.name());
    if (opts.param_buffer_count < 1)
      ZT_USER_ERROR("zero_optimization.offload_param.buffer_count ", opts.param_buffer_count,
                    ": the parameters are uploaded through buffer_count device buffers; give at least 1");
    ZT_CHECK(opts.param_buffer_size >= 1, "offload_param buffers");
  }
  ZT_CHECK(!opts.param_nvme || opts.offload_params, "parameters on NVMe without offload_params");
  ZT_CHECK(opts.reduce_bucket_size > 0 && opts.allgather_bucket_size > 0, "bucket sizes must be positive");
  const int n = layout_.num_units();
  state_.resize(n);
  stale_.assign(static_cast<size_t>(n), false);
  ZT_CHECK(static_cast<int>(local_.size()) == n, "local mask of ", local_.size(), " units for a model of ", n);
  for (int u = 0; u < n; ++u)
    for (const TiedParam& t : units[u]->tied())
      ZT_CHECK(!local_[u] || local_[t.unit], "unit ", u, " is local but the unit it ties to (", t.unit, ") is not");
  for (int u = 0; u < n; ++u)
    for (const TiedParam& t : units[u]->tied())
      ZT_CHECK(t.unit < u && t.param < static_cast<int>(layout_.unit(t.unit).params.size()),
               "unit ", u, " ties to a parameter of a later or missing unit");

  // Offsets of every local unit's full working copy (all but stage 3's
  // partitioned ones), its full gradient (stages 0-1) and its owned shard.
  // Units that are not local (another pipeline stage's) take no memory.
  int64_t full = 0, padded = 0, shard = 0;
  shard_offset_.assign(n, -1);
  grad_offset_.assign(n, -1);
  for (int u = 0; u < n; ++u) {
    if (!is_local(u)) continue;
    if (!partitioned(u)) {
      state_[u].full_offset = full;
      full += layout_.unit(u).padded;
    }
    grad_offset_[u] = padded;
    padded += layout_.unit(u).padded;
    shard_offset_[u] = shard;
    shard += layout_.unit(u).shard;
  }
  const DType pt = opts.param_dtype;
  const bool f32 = pt == DType::f32;
  auto zeroed_on = [](Device& d, DType t, int64_t count, MemTag tag) {
    Buffer b(d, t, Shape{count}, tag);
    d.memset_zero(b.data(), b.bytes());
    return b;
  };
  auto zeroed = [&](DType t, int64_t count, MemTag tag) { return zeroed_on(dev, t, count, tag); };
  if (full > 0) working_ = zeroed(pt, full, MemTag::params);
  if (opts.stage == 0) {
    if (!f32) master_ = zeroed(DType::f32, padded, MemTag::optim);
    grads_ = zeroed(DType::f32, padded, MemTag::grads);
    exp_avg_ = zeroed(DType::f32, padded, MemTag::optim);
    exp_avg_sq_ = zeroed(DType::f32, padded, MemTag::optim);
  } else if (states_on_device_) {
    master_ = zeroed(DType::f32, shard, MemTag::optim);
    // Stage 3 in fp32: the working shard is the master shard itself.
    if (opts.stage == 3 && !f32) working_shard_ = zeroed(pt, shard, MemTag::params);
    exp_avg_ = zeroed(DType::f32, shard, MemTag::optim);
    exp_avg_sq_ = zeroed(DType::f32, shard, MemTag::optim);
  } else if (opts.param_nvme) {
    // [Note: parameter offload to NVMe]: no working shard in memory but the
    // resident units' (the swap's).
    std::vector<int64_t> shards(static_cast<size_t>(n), -1);
    std::vector<std::string> names(static_cast<size_t>(n));
    for (int u = 0; u < n; ++u) {
      names[static_cast<size_t>(u)] = layout_.unit(u).name;
      if (is_local(u)) shards[static_cast<size_t>(u)] = layout_.unit(u).shard;
    }
    copies_ = dev.make_transfer_queue();
    swap_ = std::make_unique<ParamSwap>(opts.param_swap, dev, *copies_, pt, shards, names);
  } else if (opts.offload_params) {
    // [Note: parameters from the master]: none kept.
    if (!opts.param_from_master)
      working_shard_ = zeroed_on(dev.host_memory(opts.param_pin_memory), pt, shard, MemTag::offload);
  } else {
    working_shard_ = zeroed(pt, shard, MemTag::params);
  }
  shard_elems_ = shard;
  const int host_grads = opts.stage >= 1 ? placement.host_gradient_buffers() : 0;
  ZT_CHECK(host_grads >= 0 && host_grads <= 2 && (host_grads == 0 || !states_on_device_),
           "host gradient buffers ", host_grads, " from the ", placement.name(), " optimizer placement");
  if (opts.stage >= 1) {
    if (opts.stage == 1) grads_ = zeroed(DType::f32, padded, MemTag::grads);
    if (host_grads == 0) {
      grad_shard_ = zeroed(DType::f32, shard, MemTag::grads);
    } else {
      // [Note: gradients on the host]
      Device& host = dev.host_memory(opts.grad_pin_memory);
      grad_shard_ = zeroed_on(host, opts.host_grad_dtype, shard, MemTag::offload);
      if (host_grads == 2) grad_shard_alt_ = zeroed_on(host, opts.host_grad_dtype, shard, MemTag::offload);
      if (!copies_) copies_ = dev.make_transfer_queue();
      landing_ = std::make_unique<GradLanding>(*copies_, dev.host_memory(true));
      shard_sq_ = zeroed(DType::f64, std::max<int64_t>(1, n), MemTag::workspace);
      sq_on_device_.assign(static_cast<size_t>(n), false);
      host_sq_.assign(static_cast<size_t>(n), 0.0);
      sq_on_host_.assign(static_cast<size_t>(n), false);
      landed_.assign(static_cast<size_t>(n), false);
      if (opts.grad_accumulate_on_device) {
        ZT_CHECK(opts.stage >= 2 && opts.micro_batches >= 2, "offload.grad_accumulation \"device\" at stage ",
                 opts.stage, " with ", opts.micro_batches, " micro-batches a step");
        grad_acc_ = zeroed(DType::f32, shard, MemTag::grads);
        micro_done_.assign(static_cast<size_t>(n), 0);
      }
    }
  }
  if (!grads_.empty()) {
    // [Note: gradients written, not zeroed]: the spans of grads_ that no
    // product overwrites, adjacent ones merged (units lie end to end), then
    // sorted by size.
    std::vector<Kernels::ZeroSpan> keep;
    auto clear = [&](int64_t b, int64_t e) {
      if (b >= e) return;
      if (!keep.empty() && keep.back().end == b)
        keep.back().end = e;
      else
        keep.push_back({b, e});
    };
    for (int u = 0; u < n; ++u) {
      if (!is_local(u)) continue;
      const FlatUnit& fu = layout_.unit(u);
      int64_t at = grad_offset_[u];
      for (const ParamSlot& p : fu.params) {
        if (!p.grad_overwritten) continue;
        clear(at, grad_offset_[u] + p.offset);
        at = grad_offset_[u] + p.offset + p.numel();
        overwrite_first_ = true;
      }
      clear(at, grad_offset_[u] + fu.padded);
    }
    for (const Kernels::ZeroSpan& s : keep)
      (s.end - s.begin > Kernels::kZeroSpanMax ? clear_large_ : clear_small_).push_back(s);
    grads_written_.assign(static_cast<size_t>(n), false);
  }
  if (opts.host_grad_dtype != DType::f32 && !landing_)
    ZT_USER_ERROR("offload.grad_dtype \"", dtype_name(opts.host_grad_dtype),
                  "\" is the dtype of the gradients on the host; with the ", placement.name(),
                  " optimizer placement at stage ", opts.stage,
                  " they stay on the device (they go to the host at stage 1-3 with offload_optimizer.device "
                  "\"cpu\" or \"nvme\" and ratio 1)");
  ZT_CHECK(opts.host_grad_dtype == DType::f32 || opts.host_grad_dtype == DType::bf16, "host gradients in ",
           dtype_name(opts.host_grad_dtype));
  if (opts.grad_accumulate_on_device && grad_acc_.empty())
    ZT_USER_ERROR("offload.grad_accumulation \"device\" needs the gradients on the host (stage 2 or 3, the "
                  "optimizer offloaded with ratio 1)");

  for (int u = 0; u < n; ++u) {
    if (!is_local(u)) continue;
    const FlatUnit& fu = layout_.unit(u);
    const int64_t go = grad_offset_[u];
    OwnedShard s;
    s.unit = u;
    if (opts.stage == 0) {
      float* m = master_.empty() ? static_cast<float*>(working_full(u)) : master_.as<float>() + go;
      s.begin = 0;
      s.end = fu.padded;
      s.master = m;
      if (!master_.empty() && placement.refreshes_working_copy()) {
        s.param = static_cast<char*>(working_full(u));
        s.param_dtype = pt;
      }
      s.grad = grads_.as<float>() + go;
      s.exp_avg = exp_avg_.as<float>() + go;
      s.exp_avg_sq = exp_avg_sq_.as<float>() + go;
    } else {
      s.begin = layout_.shard_begin(u, rank_);
      s.end = layout_.shard_end(u, rank_);
      s.grad_on_host = landing_ != nullptr;
      s.grad_dtype = s.grad_on_host ? opts.host_grad_dtype : DType::f32;
      s.grad = grad_shard_.as<char>() + static_cast<size_t>(shard_offset_[u]) * dtype_size(s.grad_dtype);
      if (states_on_device_) {
        s.master = master_.as<float>() + shard_offset_[u];
        s.exp_avg = exp_avg_.as<float>() + shard_offset_[u];
        s.exp_avg_sq = exp_avg_sq_.as<float>() + shard_offset_[u];
        if (!working_shard_.empty() && placement.refreshes_working_copy()) {
          s.param = working_shard_.as<char>() + static_cast<size_t>(shard_offset_[u]) * dtype_size(pt);
          s.param_dtype = pt;
        }
      } else {
        s.param_dtype = pt;
        s.param_on_host = opts.offload_params;
        s.param_from_master = opts.param_from_master;
        if (opts.param_from_master)
          s.param = nullptr;
        else if (!swap_)
          s.param = working_shard_.as<char>() + static_cast<size_t>(shard_offset_[u]) * dtype_size(pt);
        else if (swap_->resident(u))
          s.param = swap_->resident_shard(u);
        else
          s.param_sink = swap_.get();
      }
    }
    s.spans = layout_.decay_spans(u, s.begin, s.end);
    s.index = static_cast<int>(owned_.size());
    owned_.push_back(std::move(s));
  }
  owned_index_.assign(n, -1);
  for (const OwnedShard& s : owned_) owned_index_[s.unit] = s.index;
  if (opts.offload_params) {
    for (int u = 0; u < n; ++u)
      if (is_local(u) && partitioned(u) && layout_.unit(u).shard > opts.param_buffer_size)
        ZT_USER_ERROR("zero_optimization.offload_param.buffer_size ", opts.param_buffer_size,
                      " is smaller than the shard of unit ", u, " ('", layout_.unit(u).name, "'): ",
                      layout_.unit(u).shard, " elements; give at least that");
    // Buffers as large as the largest shard they carry (at most buffer_size).
    for (int u = 0; u < n; ++u)
      if (is_local(u) && partitioned(u)) upload_elems_ = std::max(upload_elems_, layout_.unit(u).shard);
    if (!copies_) copies_ = dev.make_transfer_queue();
    int64_t whole = 0;  // the shards of the units kept whole, uploaded at each publish
    for (int u = 0; u < n; ++u)
      if (is_local(u) && !partitioned(u)) whole += layout_.unit(u).shard;
    if (whole > 0) persistent_upload_ = Buffer(dev, pt, Shape{whole}, MemTag::comm);
    persist_at_.assign(static_cast<size_t>(n), -1);
    int64_t at = 0;
    for (int u = 0; u < n; ++u)
      if (is_local(u) && !partitioned(u)) {
        persist_at_[static_cast<size_t>(u)] = at;
        at += layout_.unit(u).shard;
      }
    for (int i = 0; i < opts.param_buffer_count; ++i) upload_pool_.emplace_back();
    upload_user_.assign(upload_pool_.size(), -1);
    upload_done_.assign(upload_pool_.size(), TransferTicket{});
  }
  ZT_CHECK(!opts.param_from_master || (opts.offload_params && !swap_ && opts.stage == 3),
           "parameters from the master need offload_param \"cpu\" at stage 3");
  placement_.attach(owned_);
  if (opts.param_from_master)
    for (const OwnedShard& s : owned_)
      if (placement_.host_master(s) == nullptr)
        ZT_USER_ERROR("offload.param_from_master: the ", placement_.name(),
                      " optimizer keeps no fp32 master in host memory to upload the parameters from; it needs "
                      "zero_optimization.offload_optimizer.device \"cpu\" with ratio 1");
}

ZeroEngine::~ZeroEngine() {
  // Never leave a collective reading freed memory; errors here cannot be
  // reported (a destructor must not throw), the job is ending anyway.
  placement_.detach();  // nor an optimizer worker reading owned_
  try {
    progress_reductions(true);
    for (int u = 0; u < layout_.num_units(); ++u) finish_all(state_[u].gather);
    if (landing_) landing_->drain();
    if (copies_) copies_->wait_all();  // uploads from the swap's buffers
  } catch (...) {
  }
  landing_.reset();  // before the transfer queue it uses
  swap_.reset();
}

bool ZeroEngine::partitioned(int u) const {
  return opts_.stage == 3 && layout_.unit(u).numel >= opts_.param_persistence_threshold;
}

void* ZeroEngine::working_full(int u) const {
  const UnitState& st = state_[u];
  if (st.full_offset >= 0)
    return static_cast<char*>(working_.data()) + static_cast<size_t>(st.full_offset) * dtype_size(opts_.param_dtype);
  ZT_CHECK(!st.gathered.empty(), "unit ", u, " used while not gathered");
  return st.gathered.data();
}

void ZeroEngine::init_params(uint64_t seed) {
  // Computed on the host, then copied to the engine's device.
  std::vector<float> host;
  for (const OwnedShard& s : owned_) {
    host.assign(static_cast<size_t>(s.numel()), 0.0f);  // padding stays zero
    const FlatUnit& fu = layout_.unit(s.unit);
    for (int p = 0; p < static_cast<int>(fu.params.size()); ++p) {
      const ParamSlot& slot = fu.params[p];
      const int64_t b = std::max(s.begin, slot.offset);
      const int64_t e = std::min(s.end, slot.offset + slot.numel());
      if (b >= e) continue;
      // init_param is a pure function of the element index: pieces on all
      // threads give the values of one call (billions of elements at start).
      constexpr int64_t kPiece = int64_t{1} << 20;
      const int64_t pieces = (e - b + kPiece - 1) / kPiece;
      const Unit& unit = *units_[s.unit];
#pragma omp parallel for schedule(dynamic) if (pieces > 1)
      for (int64_t i = 0; i < pieces; ++i) {
        const int64_t at = b + i * kPiece, n = std::min(kPiece, e - at);
        unit.init_param(p, at - slot.offset, n, host.data() + (at - s.begin), seed, s.unit);
      }
    }
    placement_.write_state(s, OptimizerState::master, host.data());
  }
  publish_params();
}

// ---- parameters -----------------------------------------------------------

void ZeroEngine::start_gather(int u) {
  UnitState& st = state_[u];
  if (!st.gathered.empty()) return;
  const FlatUnit& fu = layout_.unit(u);
  st.gathered = Buffer(dev_, opts_.param_dtype, Shape{fu.padded}, MemTag::params);
  await_update(u);
  const void* shard = host_shard(u);
  if (opts_.offload_params) {
    TransferTicket uploaded;
    shard = upload_shard(u, shard, &uploaded);
    if (swap_) swap_->used(u, uploaded);  // the read buffer is free once the copy is done
  }
  all_gather_unit(dp_, dev_, kernels_, shard, st.gathered.data(), fu.shard, opts_.param_dtype, opts_.allgather_bucket_size,
                  st.gather);
  live_ += fu.padded;
  peak_live_ = std::max(peak_live_, live_);
}

// The owned shard of unit u that a gather starts from: the device's working
// (or fp32 master) shard, the host copy ([Note: parameter offload]), or the
// swap's buffer that it was read into ([Note: parameter offload to NVMe]).
const void* ZeroEngine::host_shard(int u) {
  if (swap_) return swap_->shard(u);
  if (opts_.param_from_master) return placement_.host_master(owned_[static_cast<size_t>(owned_index_[u])]);
  if (working_shard_.empty()) return master_.as<float>() + shard_offset_[u];
  return working_shard_.as<char>() + static_cast<size_t>(shard_offset_[u]) * dtype_size(opts_.param_dtype);
}

// [Note: parameter offload] A pool buffer for unit u's shard, uploaded from
// host memory; the all-gather queued after it waits for the copy.
const void* ZeroEngine::upload_shard(int u, const void* host_shard, TransferTicket* uploaded) {
  const FlatUnit& fu = layout_.unit(u);
  auto free_slot = [&] {
    for (size_t i = 0; i < upload_user_.size(); ++i)
      if (upload_user_[i] < 0) return static_cast<int>(i);
    return -1;
  };
  int slot = free_slot();
  if (slot < 0) {  // every buffer in flight: complete the oldest gather
    wait_gather(upload_order_.front());
    slot = free_slot();
  }
  Buffer& b = upload_pool_[static_cast<size_t>(slot)];
  if (b.empty()) b = Buffer(dev_, opts_.param_dtype, Shape{upload_elems_}, MemTag::comm);
  // The buffer is written again once the gather that last read it has run.
  if (opts_.param_from_master) {
    upload_rounded(b.data(), static_cast<const float*>(host_shard), fu.shard);
  } else {
    const TransferTicket t = copies_->to_device(
        b.data(), host_shard, static_cast<size_t>(fu.shard) * dtype_size(opts_.param_dtype),
        upload_done_[static_cast<size_t>(slot)]);
    copies_->compute_waits(t);
    if (uploaded != nullptr) *uploaded = t;
  }
  upload_user_[static_cast<size_t>(slot)] = u;
  upload_order_.push_back(u);
  state_[u].upload = slot;
  return b.data();
}

// [Note: parameters from the master] The copy into a staging buffer waits
// for the cast that last read the buffer; the cast, on the compute stream,
// waits for the copy, and comes after the compute that last read `dst`.
void ZeroEngine::upload_rounded(void* dst, const float* host_src, int64_t n) {
  const int k = next_staging_;
  next_staging_ ^= 1;
  Buffer& s = staging_[k];
  if (s.empty() || s.tensor().numel() < n) {
    copies_->wait(staging_done_[k]);
    s = Buffer(dev_, DType::f32, Shape{std::max(n, upload_elems_)}, MemTag::comm);
  }
  const TransferTicket t = copies_->to_device(s.data(), host_src, static_cast<size_t>(n) * sizeof(float), staging_done_[k]);
  copies_->compute_waits(t);
  kernels_.cast(Tensor(dst, opts_.param_dtype, Shape{n}, dev_.kind()), Tensor(s.data(), DType::f32, Shape{n}, dev_.kind()));
  staging_done_[k] = copies_->mark_compute();
}

void ZeroEngine::wait_gather(int u) {
  UnitState& st = state_[u];
  finish_all(st.gather);
  if (st.upload >= 0) {
    upload_done_[static_cast<size_t>(st.upload)] = copies_->mark_compute();
    upload_user_[static_cast<size_t>(st.upload)] = -1;
    upload_order_.erase(std::find(upload_order_.begin(), upload_order_.end(), u));
    st.upload = -1;
  }
}

void ZeroEngine::free_gathered(int u) {
  UnitState& st = state_[u];
  if (st.gathered.empty()) return;
  wait_gather(u);
  st.gathered.reset();
  live_ -= layout_.unit(u).padded;
}

void ZeroEngine::prefetch(int u, Phase phase) {
  const int n = layout_.num_units();
  const int step = phase == Phase::forward ? 1 : -1;
  int64_t budget = opts_.prefetch_bucket_size;
  for (int v = u + step; v >= 0 && v < n && budget > 0; v += step) {
    if (!is_local(v)) break;  // the next units run on another pipeline stage
    if (!partitioned(v) || !state_[v].gathered.empty()) continue;
    const int64_t size = layout_.unit(v).padded;
    if (size > budget || live_ + size > opts_.max_live_parameters) break;
    start_gather(v);
    budget -= size;
  }
}

// [Note: parameter offload to NVMe] The reads of the units that will be
// gathered next, from unit `from` in the direction `step`, while read buffers
// are free: the units the prefetch gathers and those after them.
void ZeroEngine::read_ahead(int from, int step) {
  for (int v = from; v >= 0 && v < layout_.num_units(); v += step) {
    if (!is_local(v)) break;
    if (!partitioned(v) || !state_[v].gathered.empty()) continue;
    if (!swap_->prefetch(v)) break;
  }
}

std::vector<Tensor> ZeroEngine::acquire(int unit, Phase phase) {
  ZT_CHECK(is_local(unit), "parameters of unit ", unit, " asked on a rank that does not hold it");
  std::vector<int> needed{unit};
  for (const TiedParam& t : units_[unit]->tied()) needed.push_back(t.unit);
  if (swap_) {
    for (int u : needed)
      if (partitioned(u) && state_[u].gathered.empty()) swap_->prefetch(u);
    read_ahead(unit, phase == Phase::forward ? 1 : -1);
  }
  for (int u : needed) {
    ++state_[u].refs;
    if (stale_[static_cast<size_t>(u)]) publish_unit(u);
    if (partitioned(u)) start_gather(u);
  }
  if (partitioned(unit)) prefetch(unit, phase);
  for (int u : needed) wait_gather(u);

  const size_t es = dtype_size(opts_.param_dtype);
  auto view = [&](int u, int p) {
    const ParamSlot& slot = layout_.unit(u).params[p];
    return Tensor(static_cast<char*>(working_full(u)) + static_cast<size_t>(slot.offset) * es, opts_.param_dtype,
                  slot.shape, dev_.kind());
  };
  std::vector<Tensor> views;
  for (int p = 0; p < static_cast<int>(layout_.unit(unit).params.size()); ++p) views.push_back(view(unit, p));
  for (const TiedParam& t : units_[unit]->tied()) views.push_back(view(t.unit, t.param));
  return views;
}

void ZeroEngine::set_run_length(int n) {
  ZT_CHECK(n >= 1, "run length ", n);
  if (n == 1 && run_length_ == 1) return;  // one micro-batch at a time: nothing counted
  ZT_CHECK(n == 1 || grad_acc_.empty(), "offload.grad_accumulation \"device\" with breadth-first runs");
  run_length_ = n;
  for (auto& seen : run_seen_) seen.assign(static_cast<size_t>(layout_.num_units()), 0);
}

// [Note: breadth-first walk]: whether the same unit comes again at once in
// this phase (or, for done(), with its next micro-batch's backward). Counts
// one use.
bool ZeroEngine::more_in_run(int unit, int kind) {
  if (run_length_ <= 1) return false;
  int& seen = run_seen_[static_cast<size_t>(kind)][static_cast<size_t>(unit)];
  if (++seen < run_length_) return true;
  seen = 0;
  return false;
}

void ZeroEngine::release(int unit, Phase phase) {
  std::vector<int> used{unit};
  for (const TiedParam& t : units_[unit]->tied()) used.push_back(t.unit);
  // A unit that comes again at once (the run's next micro-batch) stays.
  const bool again = more_in_run(unit, static_cast<int>(phase));
  for (int u : used) {
    UnitState& st = state_[u];
    ZT_CHECK(st.refs > 0, "unit ", u, " released more often than acquired");
    if (--st.refs > 0 || !partitioned(u) || again) continue;
    // [Note: reuse distance] Keep a unit gathered when its next use comes
    // within stage3_max_reuse_distance gathered elements and the live
    // parameters allow. Released in forward by unit k (itself or a unit tied
    // to it), it is next needed at the latest in backward, after every unit
    // past k has gone forward and backward: about twice their parameters. A
    // recomputed unit is used at once. Released in backward by a tied unit k,
    // it is needed by its own backward after the units between them.
    int64_t distance = -1;  // -1: not used again this step
    if (phase == Phase::recompute) {
      distance = 0;
    } else if (phase == Phase::forward) {
      distance = 0;
      for (int v = unit + 1; v < layout_.num_units(); ++v) distance += 2 * layout_.unit(v).numel;
    } else if (u != unit) {
      distance = 0;
      for (int v = u + 1; v < unit; ++v) distance += layout_.unit(v).numel;
    } else {
      // After its backward, a unit is next used by the next micro-batch's
      // forward of this step (gradient accumulation, pipeline micro-batches),
      // after every other unit this rank holds has run; publish_params drops
      // whatever is still gathered at the end of the step.
      distance = 0;
      for (int v = 0; v < layout_.num_units(); ++v)
        if (v != u && is_local(v)) distance += layout_.unit(v).numel;
    }
    const bool keep =
        distance >= 0 && distance <= opts_.max_reuse_distance && live_ <= opts_.max_live_parameters;
    if (!keep) free_gathered(u);
  }
}

void ZeroEngine::apply_optimizer(const OptimizerStepScalars& s) {
  for (const OwnedShard& sh : owned_) placement_.update(sh, s);
  placement_.finish();
  working_fresh_ = states_on_device_ && placement_.refreshes_working_copy();
}

double ZeroEngine::reduce_owned_sum(double local) {
  return opts_.stage == 0 ? local : all_reduce_scalar(host_dp_, local);
}

void ZeroEngine::publish_params() {
  const DType pt = opts_.param_dtype;
  // [Note: working copy from the update]
  const bool fresh = working_fresh_;
  working_fresh_ = false;
  if (opts_.stage == 0) {
    if (!master_.empty() && !fresh) kernels_.cast(working_.tensor(), master_.tensor());
    return;
  }
  // Gathered copies are stale once the shards change.
  for (int u = 0; u < layout_.num_units(); ++u) {
    ZT_CHECK(state_[u].refs == 0, "publish_params while unit ", u, " is in use");
    free_gathered(u);
  }
  // [Note: parameter offload to NVMe]: the new shards' writes are not
  // waited for here; they run under the next step's reads.
  const size_t es = dtype_size(pt);
  std::vector<PendingCollective> pending;
  if (lazy_publish()) {
    // [Note: streamed update] Each unit kept whole is gathered again at its
    // next use (publish_unit), once the placement has its shard ready.
    for (int u = 0; u < layout_.num_units(); ++u)
      stale_[static_cast<size_t>(u)] = is_local(u) && !partitioned(u);
    awaited_all_ = false;
    return;
  }
  if (!states_on_device_) {
    // The placement has refreshed the working shard: all-gather the units
    // kept whole straight from it.
    // With the parameters offloaded, the shards of those units go through
    // one device buffer first.
    // With the parameters offloaded, the shards of those units are uploaded
    // into one device buffer first, on the copy stream, after the gathers
    // that last read it; each gather waits for its upload only.
    const TransferTicket after = persistent_upload_.empty() ? TransferTicket{} : copies_->mark_compute();
    if (swap_)  // the reads of the whole units' shards at once, as buffers allow
      for (int u = 0; u < layout_.num_units(); ++u)
        if (is_local(u) && !partitioned(u) && !swap_->prefetch(u)) break;
    int64_t at = 0;
    for (int u = 0; u < layout_.num_units(); ++u) {
      if (!is_local(u) || partitioned(u)) continue;
      const FlatUnit& fu = layout_.unit(u);
      const char* shard = static_cast<const char*>(host_shard(u));
      if (!persistent_upload_.empty()) {
        char* dst = persistent_upload_.as<char>() + static_cast<size_t>(at) * es;
        at += fu.shard;
        if (opts_.param_from_master) {
          upload_rounded(dst, reinterpret_cast<const float*>(shard), fu.shard);
        } else {
          const TransferTicket t = copies_->to_device(dst, shard, static_cast<size_t>(fu.shard) * es, after);
          copies_->compute_waits(t);
          if (swap_) swap_->used(u, t);
        }
        shard = dst;
      }
      all_gather_unit(dp_, dev_, kernels_, shard, working_full(u), fu.shard, pt, opts_.allgather_bucket_size, pending);
    }
    finish_all(pending);
    return;
  }
  if (!working_shard_.empty() && !fresh) kernels_.cast(working_shard_.tensor(), master_.tensor());
  // Units kept whole: cast the owned shard and all-gather it. The send
  // buffer holds the shards of those units only.
  int64_t whole = 0;
  for (int u = 0; u < layout_.num_units(); ++u)
    if (is_local(u) && !partitioned(u)) whole += layout_.unit(u).shard;
  if (whole == 0) return;
  Buffer send(dev_, pt, Shape{whole}, MemTag::comm);
  int64_t at = 0;
  for (int u = 0; u < layout_.num_units(); ++u) {
    if (!is_local(u) || partitioned(u)) continue;
    const FlatUnit& fu = layout_.unit(u);
    void* shard = send.as<char>() + static_cast<size_t>(at) * es;
    at += fu.shard;
    kernels_.cast(Tensor(shard, pt, Shape{fu.shard}, dev_.kind()),
                  Tensor(master_.as<float>() + shard_offset_[u], DType::f32, Shape{fu.shard}, dev_.kind()));
    all_gather_unit(dp_, dev_, kernels_, shard, working_full(u), fu.shard, pt, opts_.allgather_bucket_size, pending);
  }
  finish_all(pending);
}

bool ZeroEngine::lazy_publish() const { return !states_on_device_ && !swap_; }

// [Note: streamed update] The shard of unit u as its latest update left it.
void ZeroEngine::await_update(int u) {
  if (states_on_device_) return;
  placement_.await_shard(owned_[static_cast<size_t>(owned_index_[u])]);
}

// [Note: streamed update] Unit u kept whole, gathered again from its new
// shard (what publish_params does for every unit without the stream).
void ZeroEngine::publish_unit(int u) {
  stale_[static_cast<size_t>(u)] = false;
  await_update(u);
  const FlatUnit& fu = layout_.unit(u);
  const void* shard = host_shard(u);
  if (!persistent_upload_.empty()) {
    // The shard goes through the device buffer of the whole units first,
    // after the gathers that last read it.
    void* dst = persistent_upload_.as<char>() + static_cast<size_t>(persist_at_[u]) * dtype_size(opts_.param_dtype);
    if (opts_.param_from_master) {
      upload_rounded(dst, static_cast<const float*>(shard), fu.shard);
    } else {
      const TransferTicket t = copies_->to_device(dst, shard, static_cast<size_t>(fu.shard) * dtype_size(opts_.param_dtype),
                                                  copies_->mark_compute());
      copies_->compute_waits(t);
    }
    shard = dst;
  }
  std::vector<PendingCollective> pending;
  all_gather_unit(dp_, dev_, kernels_, shard, working_full(u), fu.shard, opts_.param_dtype, opts_.allgather_bucket_size,
                  pending);
  finish_all(pending);
}

void ZeroEngine::gather_master(int u, Buffer& full) {
  ZT_CHECK(is_local(u), "unit ", u, " is not held by this rank");
  const FlatUnit& fu = layout_.unit(u);
  full = Buffer(dev_, DType::f32, Shape{fu.padded}, MemTag::workspace);
  if (opts_.stage == 0) {
    const float* src = master_.empty() ? static_cast<const float*>(working_full(u)) : master_.as<float>() + grad_offset_[u];
    kernels_.cast(full.tensor(), Tensor(const_cast<float*>(src), DType::f32, Shape{fu.padded}, dev_.kind()));
    return;
  }
  std::vector<PendingCollective> pending;
  if (states_on_device_) {
    all_gather_unit(dp_, dev_, kernels_, master_.as<float>() + shard_offset_[u], full.data(), fu.shard, DType::f32,
                    opts_.allgather_bucket_size, pending);
    finish_all(pending);
    return;
  }
  // Offloaded master: through host memory into a device copy of the shard.
  const OwnedShard& sh = owned_[static_cast<size_t>(owned_index_[u])];
  std::vector<float> host(static_cast<size_t>(sh.numel()));
  placement_.read_state(sh, OptimizerState::master, host.data());
  Buffer shard(dev_, DType::f32, Shape{fu.shard}, MemTag::workspace);
  dev_.copy_from_host(shard.data(), host.data(), host.size() * sizeof(float));
  all_gather_unit(dp_, dev_, kernels_, shard.data(), full.data(), fu.shard, DType::f32, opts_.allgather_bucket_size,
                  pending);
  finish_all(pending);
}

const char* optimizer_state_name(OptimizerState s) {
  switch (s) {
    case OptimizerState::master: return "master";
    case OptimizerState::exp_avg: return "exp_avg";
    case OptimizerState::exp_avg_sq: return "exp_avg_sq";
  }
  return "?";
}

}  // namespace zt
