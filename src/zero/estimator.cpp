#include "zero/estimator.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "modules/activation_offload.hpp"
#include "modules/kernels.hpp"
#include "zero/grad_landing.hpp"

// [Note: memory estimate] Bytes per rank; Ψ = parameters, N = dp size.
// The ZeRO paper counts 2Ψ (16-bit parameters) + 2Ψ (16-bit gradients) + KΨ
// (K = 12: fp32 master, Adam m and v) for mixed-precision Adam. ztrain keeps
// gradients in fp32 (fp32 accumulation over micro-batches, DESIGN.md
// "Numerics"), so its replicated model states are 2 + 4 + 12 = 18 bytes per
// parameter in bf16/fp16 (16 in fp32 at stage 0, where the working copy is
// the master and K = 8).
//
// The buffers are ZeroEngine's (see its [Note: ZeRO stages]). Each unit's
// flat buffer is padded to a multiple of N (of 1 at stage 0) and a rank owns
// S = padded / N of each (FlatLayout).
//   stage 0: working copy, fp32 gradients, master (16-bit only), m, v: whole.
//   stage 1: full fp32 gradients plus the owned fp32 gradient shard; an fp32
//            master shard (whatever the dtype) and m, v over the shard.
//   stage 2: no full gradient buffer: a unit's backward writes a full-size
//            fp32 buffer of that unit, reduce-scattered into the shard at
//            its end (kept until then with overlap_comm on several ranks,
//            so one more unit).
//            A tied parameter's owner keeps its buffer from the tying unit's
//            backward to its own (GPT-2: wte through the whole backward).
//   stage 3: also the working parameters over the shard (none in fp32: the
//            master shard is the working shard), plus the live gathered
//            units ([Note: stage-3 live parameters]); units smaller than
//            stage3_param_persistence_threshold stay whole.
// Communication staging: stage 0 all-reduces in place; from stage 1 on each
// reduction stages the rank's shard of a unit (in pieces of
// reduce_bucket_size / dp), stages 1-2 publish the updated shards after the
// backward, and stage 3 gathers a unit larger than allgather_bucket_size
// through one bucket (the rules where the column is computed below).
// Offload (stage >= 1, docs/offload.md): offload_optimizer moves master, m and
// v (12 bytes per owned element, of `ratio` of the elements) to host memory,
// pinned or pageable per pin_memory, and the device keeps a working shard in
// the param dtype that the host refreshes. With ratio 1 the fp32 gradient
// shard lives in host memory too ([Note: gradients on the host]; two of them
// with the delayed update), each reduced piece staged on the device until
// its copy is done (up to GradLanding::kDefaultInFlight pieces), and with
// more than one micro-batch per step as many pinned slots of the largest
// piece take the later pieces; with ratio < 1 the device keeps it. The host step streams tiles
// through pinned parameter slots (and gradient slots when the gradients are
// on the device); the delayed update adds, for 16-bit parameters, a pinned
// copy of the new working shard (and a pinned gradient copy when the
// gradients are on the device). nvme: the states go to the NVMe files, staged through
// buffer_count / 3 sets of master, m and v buffers of one sub-group
// (min(sub_group_size, largest shard) fp32 elements), each set with its
// pinned gradient and parameter slots; each sub-group's region of a file is
// padded to the directory's direct-I/O alignment (nvme_alignment). offload_param (stage 3): the working shard lives in host memory
// instead (nvme: the first units within max_in_cpu elements in host memory,
// the others in a file, each region padded to the alignment, read through
// buffer_count pinned buffers of the largest of those shards); the device uploads each unit's shard through
// buffer_count buffers of the largest unit's shard (communication column).
// Pipeline: a stage counts every unit it holds, the tie mirror included (the
// last stage's copy of the tied embedding is a whole unit with its own
// gradient and optimizer state, as the trainer keeps it).
// Activations: each unit's output and stash per token come from its
// description (UnitActivations, modules/model_desc.hpp); a stage keeps its
// micro-batch and chunk pairs in flight, each counted as its largest chunk.

namespace zt {
int64_t arena_chunk_bytes(int64_t need) {
  return std::max<int64_t>(int64_t{1} << 16, static_cast<int64_t>(static_cast<double>(need) * 1.05));
}

int64_t classifier_workspace(const EstimateInput& in, int64_t V, int64_t C, int64_t tokens) {
  const int64_t a = static_cast<int64_t>(dtype_size(in.param_dtype));
  switch (in.classifier) {
    case EstimateInput::Classifier::cpu_chunks: {
      const int64_t row = V * 4;
      return std::clamp<int64_t>(in.classifier_chunk_bytes / row, 1, tokens) * row;
    }
    case EstimateInput::Classifier::cuda_separate:
      return std::min(in.cuda_separate_chunk_bytes, tokens * V * 4);
    case EstimateInput::Classifier::cuda_one_pass: {
      const int64_t Vp = (V + 7) / 8 * 8, lsz = in.cuda_logits_f32 ? 4 : a;
      int64_t ws = Kernels::classifier_one_pass_rows(tokens, Vp, lsz, in.cuda_one_pass_chunk_bytes) * Vp * lsz;
      if (Vp != V) ws += Vp * C * a + (Vp - V / 8 * 8) * C * 4;  // w in Vp rows, dw's tail
      return ws;
    }
  }
  return 0;
}

namespace {

// Trainer buffers per token of a micro-batch in flight: tokens and targets
// (i32) and the loss weights (f32).
constexpr int64_t kBatchBytesPerToken = 12;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
bool offloaded(const std::string& device) { return device != "none"; }
bool valid_device(const std::string& d) { return d == "none" || d == "cpu" || d == "nvme"; }

// The units a unit reads besides its own: its tied parameters' owners.
std::vector<int> tied_units(const UnitDesc& u) {
  std::vector<int> out;
  for (const TiedParam& t : u.tied) out.push_back(t.unit);
  return out;
}

// [Note: stage-3 live parameters] Replays ZeroEngine's gather policy over
// one micro-batch of one stage from the unit sizes alone: acquire gathers the
// unit and the units it ties to, then prefetches the next partitioned units
// of the stage in the direction of travel while they fit whole in
// stage3_prefetch_bucket_size and keep the live total within
// stage3_max_live_parameters; release keeps a unit gathered when its next
// use comes within stage3_max_reuse_distance elements (forward: twice the
// parameters of the model's later units; a recomputation: at once; a tied
// unit released by a later one in backward: the units between them; a unit
// after its own backward: every other unit of the stage, the next
// micro-batch's forward) and the live total allows, and frees it otherwise.
// `held`: the stage's units; `runs`: those it runs (not the tie mirror).
// Returns the peak live elements; `timeline`, when given, gets when they are
// live ([Note: device total over the step]).
struct LiveTimeline {
  int64_t forward = 0;                  // peak over the forward
  std::vector<int64_t> at_acquire;      // per unit: peak over its recomputation and backward acquire
  std::vector<int64_t> after_release;   // per unit: after its backward release (its reduction)
};
int64_t live_parameters(const ModelDesc& m, const std::vector<bool>& held, const std::vector<bool>& runs,
                        const std::vector<bool>& recomputed, const EstimateInput& in, int* uploads_in_flight,
                        LiveTimeline* timeline = nullptr) {
  const int n = m.num_units();
  const std::vector<int64_t> numels = m.unit_numels();  // the walk below asks for them O(n^2) times
  auto numel = [&](int v) { return numels[static_cast<size_t>(v)]; };
  auto partitioned = [&](int v) { return numel(v) >= in.stage3_param_persistence_threshold; };
  auto size = [&](int v) { return round_up(numel(v), in.dp); };
  std::vector<bool> gathered(static_cast<size_t>(n), false);
  // Gathers started and not yet waited for: with parameter offload each
  // holds an upload buffer ([Note: parameter offload]) until its unit is used.
  std::vector<bool> in_flight(static_cast<size_t>(n), false);
  int64_t live = 0, peak = 0;
  int flying = 0, peak_flying = 0;
  auto gather = [&](int v) {
    if (gathered[v]) return;
    gathered[v] = true;
    live += size(v);
    peak = std::max(peak, live);
    in_flight[static_cast<size_t>(v)] = true;
    peak_flying = std::max(peak_flying, ++flying);
  };
  auto needed = [&](int v) {
    std::vector<int> list{v};
    for (int t : tied_units(m.units[static_cast<size_t>(v)])) list.push_back(t);
    return list;
  };
  enum class Pass { forward, backward, recompute };
  auto prefetch = [&](int v, Pass pass) {
    const int step = pass == Pass::forward ? 1 : -1;
    int64_t budget = in.stage3_prefetch_bucket_size;
    for (int w = v + step; w >= 0 && w < n && budget > 0; w += step) {
      if (!held[w]) break;  // the next units run on another stage
      if (!partitioned(w) || gathered[w]) continue;
      if (size(w) > budget || live + size(w) > in.stage3_max_live_parameters) break;
      gather(w);
      budget -= size(w);
    }
  };
  auto acquire = [&](int v, Pass pass) {
    for (int w : needed(v))
      if (partitioned(w)) gather(w);
    if (partitioned(v)) prefetch(v, pass);
    // The unit and those it ties to are used now, whether or not v itself
    // is partitioned (a small head still uses the tied embedding).
    for (int w : needed(v))
      if (in_flight[static_cast<size_t>(w)]) {
        in_flight[static_cast<size_t>(w)] = false;
        --flying;
      }
  };
  auto release = [&](int v, Pass pass) {
    for (int w : needed(v)) {
      if (!partitioned(w) || !gathered[w]) continue;
      int64_t distance = -1;  // not used again this micro-batch
      if (pass == Pass::recompute) {
        distance = 0;
      } else if (pass == Pass::forward) {
        distance = 0;
        for (int x = v + 1; x < n; ++x) distance += 2 * numel(x);
      } else if (w != v) {
        distance = 0;
        for (int x = w + 1; x < v; ++x) distance += numel(x);
      } else {
        // After its own backward: the next micro-batch's forward, after
        // every other unit the stage holds (kept until the step ends).
        distance = 0;
        for (int x = 0; x < n; ++x)
          if (x != w && held[static_cast<size_t>(x)]) distance += numel(x);
      }
      if (distance < 0 || distance > in.stage3_max_reuse_distance || live > in.stage3_max_live_parameters) {
        gathered[w] = false;
        live -= size(w);
      }
    }
  };
  for (int v = 0; v < n; ++v) {
    if (!runs[v]) continue;
    acquire(v, Pass::forward);
    release(v, Pass::forward);
  }
  LiveTimeline t;
  t.forward = peak;
  t.at_acquire.assign(static_cast<size_t>(n), 0);
  t.after_release.assign(static_cast<size_t>(n), 0);
  for (int v = n - 1; v >= 0; --v) {
    if (!runs[v]) continue;
    int64_t& acq = t.at_acquire[static_cast<size_t>(v)];
    if (recomputed[static_cast<size_t>(v)]) {
      acquire(v, Pass::recompute);
      acq = live;
      release(v, Pass::recompute);
    }
    acquire(v, Pass::backward);
    acq = std::max(acq, live);
    release(v, Pass::backward);
    t.after_release[static_cast<size_t>(v)] = live;
  }
  if (timeline != nullptr) *timeline = std::move(t);
  if (uploads_in_flight != nullptr) *uploads_in_flight = peak_flying;
  return peak;
}

// [Note: activation offload]: whether unit u of `chunk` has its output wait
// in host memory, as the runner decides it.
bool offloaded_output(const std::vector<bool>& recomputed, const std::vector<int>& chunk, int u,
                      bool cpu_checkpointing) {
  return cpu_checkpointing && offloads_output(recomputed, u, u == chunk.back());
}

// Activation bytes per token that one micro-batch keeps in one chunk: its
// input when another stage sends it (the output of the unit before), and
// each unit's output (unless offloaded) and, unless it is recomputed, its
// stash.
int64_t chunk_saved_per_token(const ModelDesc& m, const std::vector<int>& chunk, const std::vector<bool>& recomputed,
                              int64_t a, bool cpu_checkpointing) {
  int64_t bytes = chunk.front() > 0 ? m.units[static_cast<size_t>(chunk.front() - 1)].act.output.bytes(a) : 0;
  for (int u : chunk) {
    const UnitDesc& d = m.units[static_cast<size_t>(u)];
    if (!offloaded_output(recomputed, chunk, u, cpu_checkpointing)) bytes += d.act.output.bytes(a);
    bytes += recomputed[static_cast<size_t>(u)] ? 0 : d.act.stash.bytes(a);
  }
  return bytes;
}

MemoryEstimateRow estimate_stage(const EstimateInput& in, const StageContents& sc, int pp_stage) {
  const ModelDesc& m = in.model;
  const int n = m.num_units();
  const int stage = in.zero_stage;
  const bool f32 = in.param_dtype == DType::f32;
  const int64_t pb = static_cast<int64_t>(dtype_size(in.param_dtype)), a = pb;
  const int64_t n_layout = stage == 0 ? 1 : in.dp;

  std::vector<bool> held(static_cast<size_t>(n), false), runs(static_cast<size_t>(n), false),
      owner(static_cast<size_t>(n), false);
  for (int u : sc.units()) held[static_cast<size_t>(u)] = true;
  for (const std::vector<int>& chunk : sc.chunks)
    for (int u : chunk) {
      runs[static_cast<size_t>(u)] = true;
      for (int t : tied_units(m.units[static_cast<size_t>(u)])) owner[static_cast<size_t>(t)] = true;
    }
  std::vector<bool> checkpointable(static_cast<size_t>(n));
  for (int u = 0; u < n; ++u) checkpointable[static_cast<size_t>(u)] = m.units[static_cast<size_t>(u)].checkpointable;
  const std::vector<bool> recomputed =
      recomputed_units(checkpointable, sc.chunks, in.activation_checkpointing, in.recompute_layers);

  MemoryEstimateRow r;
  r.pp_stage = pp_stage;
  // padded: all units held; persistent: stage-3 units kept whole; unit_max:
  // the largest unit; held_owner: a tied parameter's owner, whose gradient
  // buffer (stages 2-3) lives from the tying unit's backward to its own.
  // padded_of: a unit's flat buffer, padded to n_layout (a rank owns
  // padded_of / n_layout of it).
  auto padded_of = [&](int u) { return round_up(m.units[static_cast<size_t>(u)].numel(), n_layout); };
  int64_t padded = 0, persistent = 0, unit_max = 0, held_owner = 0, other_max = 0;
  for (int u = 0; u < n; ++u) {
    if (!held[static_cast<size_t>(u)]) continue;
    const int64_t numel = m.units[static_cast<size_t>(u)].numel(), p = padded_of(u);
    r.stage_params += numel;
    padded += p;
    unit_max = std::max(unit_max, p);
    if (numel < in.stage3_param_persistence_threshold) persistent += p;
    if (owner[static_cast<size_t>(u)])
      held_owner += p;
    else
      other_max = std::max(other_max, p);
  }
  const int64_t shard = padded / n_layout;
  // One rank's reductions finish at once (ZeroEngine::done), so only with
  // several does overlap_comm keep the previous unit's buffer.
  const int nbuf = in.overlap_comm.value_or(stage == 3) && in.dp > 1 ? 2 : 1;

  // Parameters: replicated below stage 3. Stage 3: the units kept whole, the
  // live gathered units, and the working shard of every unit (none in fp32,
  // where the fp32 master shard is the working shard).
  int uploads_in_flight = 0;  // stage 3: gathers started and not yet used, at most
  LiveTimeline live;          // stage 3: when the gathered units are live
  int64_t live_peak = 0;      // and their peak
  if (stage < 3) {
    r.params = padded * pb;
  } else {
    live_peak = live_parameters(m, held, runs, recomputed, in, &uploads_in_flight, &live);
    r.params = (persistent + live_peak) * pb;
    // In fp32 the master shard is the working shard, unless the master is offloaded.
    const int64_t working_shard = f32 && !offloaded(in.offload_optimizer) ? 0 : shard * pb;
    int64_t& param_host = in.param_pin_memory ? r.host_pinned : r.host_pageable;
    if (in.offload_param == "none") r.params += working_shard;
    // [Note: parameters from the master]: no host copy.
    if (in.offload_param == "cpu" && !in.param_from_master) param_host += shard * pb;
    if (in.offload_param == "nvme") {
      // [Note: parameter offload to NVMe] (zero/param_swap.hpp): the first
      // units whose shards fit in max_in_cpu stay in host memory; the
      // others have a region of the file each, at the alignment, and are
      // read through buffer_count pinned buffers of the largest of them.
      const int64_t al = in.param_nvme_alignment;
      int64_t resident = 0, largest = 0;
      bool filling = true;
      for (int u = 0; u < n; ++u) {
        if (!held[static_cast<size_t>(u)]) continue;
        const int64_t s_u = padded_of(u) / n_layout;
        if (filling && resident + s_u <= in.param_max_in_cpu) {
          resident += s_u;
          continue;
        }
        filling = false;
        r.nvme += round_up(s_u * pb, al);
        largest = std::max(largest, s_u);
      }
      param_host += resident * pb;
      if (largest > 0) r.host_pinned += in.param_buffer_count * (round_up(largest * pb, al) + al);
    }
  }
  // Stages 1-2 with the optimizer offloaded: the working shard the host refreshes.
  if ((stage == 1 || stage == 2) && offloaded(in.offload_optimizer)) r.params += shard * pb;

  // Gradients: stage 0 full; stage 1 full + owned shard; stages 2-3 the owned
  // shard + the full-size buffers of the units in backward (the held tied
  // owner, the current unit, and with overlap_comm the previous one still
  // being reduce-scattered).
  int64_t device_grads = stage <= 1 ? padded : held_owner + nbuf * other_max;
  const int64_t grad_shard = stage == 0 ? 0 : shard;
  // Optimizer: stage 0 keeps a master only for 16-bit parameters; stages >= 1
  // keep an fp32 master shard whatever the dtype.
  const int64_t K = stage == 0 ? (f32 ? 8 : 12) : 12;
  // [Note: gradients on the host]: with the whole optimizer offloaded.
  const bool host_grads = stage >= 1 && offloaded(in.offload_optimizer) && in.offload_ratio >= 1.0;
  const int64_t piece = std::min(in.reduce_bucket_size / std::max(1, in.dp), unit_max / n_layout);
  if (host_grads) {
    int64_t& grads_host = in.optimizer_pin_memory ? r.host_pinned : r.host_pageable;
    grads_host += grad_shard * in.host_grad_bytes * (in.delayed_update ? 2 : 1);
    // Later pieces of an element land in pinned slots and are added on the
    // host, unless the device accumulates them (offload.grad_accumulation).
    // bf16 gradients land once ([Note: bf16 gradients on the host]).
    if (in.grad_accumulation_on_device && stage >= 2)
      device_grads += grad_shard;  // the device accumulator; every element lands once
    else if (in.micro_batches_per_step > 1 && in.host_grad_bytes == 4)
      r.host_pinned += GradLanding::kDefaultInFlight * piece * 4;
  } else {
    device_grads += grad_shard;
  }
  if (!offloaded(in.offload_optimizer)) {
    r.optimizer = K * shard;
  } else {
    // `ratio` of the owned elements (DeepSpeed's sub-group order: the first
    // ones) go to the host, the rest keep their states on the device.
    const int64_t on_host = static_cast<int64_t>(in.offload_ratio * static_cast<double>(shard));
    r.optimizer = 12 * (shard - on_host);
    // Pinned slots of the host step: a gradient and a parameter slot each,
    // one tile or the largest owned shard.
    const int64_t largest_shard = std::max<int64_t>(1, unit_max / n_layout);
    if (in.delayed_update) r.host_pinned += on_host * ((host_grads ? 0 : 4) + (f32 ? 0 : pb));
    int64_t& states_host = in.optimizer_pin_memory ? r.host_pinned : r.host_pageable;
    if (in.offload_optimizer == "cpu") {
      r.host_pinned += (host_grads ? 1 : 2) * in.offload_slots * std::min(in.offload_tile_elements, largest_shard) * 4;
      states_host += 12 * on_host;
    } else {
      // [Note: NVMe optimizer step]: buffer_count / 3 sets of master, m and
      // v buffers of one sub-group (at the file system's alignment, 4 KiB
      // here), each with a pinned gradient and parameter slot.
      const int64_t L = std::min(in.sub_group_size, largest_shard);
      const int64_t sets = in.optimizer_buffer_count / 3;
      const int64_t al = in.nvme_alignment;
      if (in.offload_ratio >= 1.0) {
        // Each sub-group's region of the three files, at the alignment.
        for (int u = 0; u < n; ++u) {
          if (!held[static_cast<size_t>(u)]) continue;
          const int64_t s_u = padded_of(u) / n_layout;
          for (int64_t off = 0; off < s_u; off += in.sub_group_size)
            r.nvme += 3 * round_up(4 * std::min(in.sub_group_size, s_u - off), al);
        }
      } else {
        r.nvme += 12 * on_host;
      }
      states_host += sets * 3 * round_up(4 * L, al);
      r.host_pinned += sets * (host_grads ? 4 : 8) * L;
    }
  }
  // Parameter offload: the device's upload pool ([Note: parameter offload]),
  // whose buffers are made as gathers in flight need them, up to buffer_count.
  int64_t upload_pool = 0;
  if (stage == 3 && offloaded(in.offload_param))
    upload_pool = std::min(in.param_buffer_count, std::max(1, uploads_in_flight)) *
                  std::min(in.param_buffer_size, unit_max / n_layout) * pb;
  // and with parameters from the master, two fp32 staging buffers.
  if (stage == 3 && in.offload_param == "cpu" && in.param_from_master)
    upload_pool += 2 * (unit_max / n_layout) * 4;
  r.grads = device_grads * 4;

  // Communication staging (buckets.cpp; stage 0 all-reduces in place, and
  // one rank adds its gradient into its shard straight from its buffer
  // unless it lands on the host). A unit's reduce-scatter receives its shard
  // S in an fp32 buffer of min(S, C) elements, C = reduce_bucket_size / dp,
  // and a unit cut into pieces of C also packs dp of them. Stage 1 starts
  // every unit's at the step's end; stages 2-3 one unit's at a time (two
  // with overlap_comm on several ranks). With the gradients landing on the
  // host those buffers are the pieces the landing holds: up to
  // kDefaultInFlight of them besides the one being staged, and in bf16
  // rounded copies, the next one's made while its fp32 staging is alive.
  const bool staged = stage >= 1 && (in.dp > 1 || host_grads);
  const int64_t c_cap = std::max<int64_t>(1, in.reduce_bucket_size / std::max(1, in.dp));
  auto staging = [&](int64_t p) {  // one unit's reduction, p = its padded elements
    const int64_t S = p / n_layout, c = std::min(S, c_cap);
    return c * 4 + (c < S ? in.dp * c * 4 : 0);
  };
  // The held units reduced in one piece: their staging's sum and largest.
  int64_t one_piece_sum = 0, one_piece_max = 0;
  for (int u = 0; u < n; ++u) {
    const int64_t S = padded_of(u) / n_layout;
    if (!held[static_cast<size_t>(u)] || S > c_cap) continue;
    one_piece_sum += S * 4;
    one_piece_max = std::max(one_piece_max, S * 4);
  }
  int64_t comm_red = 0;  // the reductions' staging at its peak
  if (staged && stage == 1) {
    // A unit in one piece keeps its staging until every unit's is started;
    // one cut into pieces finishes each piece at once (into the landing,
    // which holds kDefaultInFlight).
    comm_red = one_piece_sum;
    if (unit_max / n_layout > c_cap)
      comm_red += (1 + in.dp + (host_grads ? GradLanding::kDefaultInFlight : 0)) * c_cap * 4;
    if (host_grads && in.host_grad_bytes == 2) comm_red += piece * 2;
  } else if (staged) {
    // A unit in one piece stays staged while the next unit's backward runs
    // with overlap_comm on several ranks; one cut into pieces finishes each
    // piece at once.
    comm_red = staging(unit_max) + (nbuf - 1) * one_piece_max;
    if (host_grads && in.host_grad_bytes == 4) comm_red += GradLanding::kDefaultInFlight * piece * 4;
    if (host_grads && in.host_grad_bytes == 2) comm_red += (GradLanding::kDefaultInFlight + 1) * piece * 2;
  }
  // Publishing the updated shards at stages 1-2 (publish_params), after the
  // reductions: from a send buffer of the rank's shards in the parameter
  // dtype when the optimizer is on the device (from the working shard the
  // host refreshed otherwise), and a unit whose shard exceeds
  // allgather_bucket_size / dp gathered in pieces through dp of them.
  // Stage 3 gathers such a unit through one all-gather bucket.
  const int64_t ag_cap = std::max<int64_t>(1, in.allgather_bucket_size / std::max(1, in.dp));
  int64_t publish = 0;
  if (stage == 1 || stage == 2) {
    if (!offloaded(in.offload_optimizer)) publish += shard * pb;
    if (unit_max / n_layout > ag_cap) publish += in.dp * ag_cap * pb;
  }
  r.comm = std::max(comm_red, publish);
  if (stage == 3 && unit_max > in.allgather_bucket_size) r.comm += in.allgather_bucket_size * pb;
  r.comm += upload_pool;

  // Activations: the pairs in flight, each counted as the stage's largest
  // chunk (exact with one chunk per stage) plus its micro-batch's buffers.
  const int64_t tokens = in.micro_batch * m.shape.seq_len;
  int64_t chunk_max = 0, chunk_sum = 0;
  int64_t offloaded_sum = 0, offloaded_max = 0;  // per token, over the stage's units
  for (const std::vector<int>& chunk : sc.chunks) {
    const int64_t bytes = chunk_saved_per_token(m, chunk, recomputed, a, in.cpu_checkpointing);
    chunk_max = std::max(chunk_max, bytes);
    chunk_sum += bytes;
    for (int u : chunk)
      if (offloaded_output(recomputed, chunk, u, in.cpu_checkpointing)) {
        const int64_t out = m.units[static_cast<size_t>(u)].act.output.bytes(a);
        offloaded_sum += out;
        offloaded_max = std::max(offloaded_max, out);
      }
  }
  r.activations = sc.in_flight * (tokens * kBatchBytesPerToken + arena_chunk_bytes(tokens * chunk_max));
  r.micro_batch_activations = tokens * chunk_sum;
  if (offloaded_max > 0) {
    // The device pool: one stage walks its micro-batches in flight unit by
    // unit, each holding one slot, plus the one being written or fetched; a
    // pipeline stage runs one micro-batch's chunk at a time: two slots.
    const int64_t walking = in.pp == 1 ? sc.in_flight : 1;
    r.activations += (walking + 1 + ActivationOffload::kSlack) * tokens * offloaded_max;
    r.host_pinned += sc.in_flight * tokens * offloaded_sum;
  }

  // Workspace: the runner's two math-dtype activation-gradient buffers, as
  // wide as the widest unit input of the stage, for the whole backward, plus
  // the largest unit backward: its temporaries, its recomputed output and
  // stash under checkpointing, and a head's chunk of logits rows.
  int64_t input_width = 0, unit_ws = 0;
  for (int u = 1; u < n; ++u) {
    if (!runs[static_cast<size_t>(u)]) continue;
    const UnitActivations& prev = m.units[static_cast<size_t>(u - 1)].act;
    input_width = std::max(input_width, prev.output.act + prev.output.f32);
  }
  for (int u = 0; u < n; ++u) {
    if (!runs[static_cast<size_t>(u)]) continue;
    const UnitDesc& d = m.units[static_cast<size_t>(u)];
    int64_t ws = tokens * d.act.backward.bytes(a);
    if (recomputed[static_cast<size_t>(u)]) ws += tokens * (d.act.output + d.act.stash).bytes(a);
    if (d.act.logits_width > 0) ws += classifier_workspace(in, d.act.logits_width, m.shape.d_model, tokens);
    unit_ws = std::max(unit_ws, ws);
  }
  // One stage with several micro-batches in flight walks them breadth-first
  // ([Note: breadth-first walk]): two buffers for each of them.
  r.workspace_need = tokens * 2 * input_width * 4 * (in.pp == 1 ? sc.in_flight : 1) + unit_ws;
  r.workspace = arena_chunk_bytes(r.workspace_need);

  // [Note: device total over the step] The columns are each tag's peak, and
  // the tags do not all peak at once: at stages 2-3 the gathered units peak
  // at the end of the forward (the last units kept for their reuse, the
  // tied embedding for the head), the gradient buffers and the reductions'
  // staging unit by unit in the backward, after each unit's parameters are
  // released. So without a pipeline the device total follows the step: the
  // activations and workspace (arenas that keep their chunks) and every
  // buffer made once count whole, and the rest is the largest of
  //  - the forward: the live units at their forward peak, and with several
  //    micro-batches a step one at a time, the last pieces still landing;
  //  - each unit's backward acquire: the live units then (its recomputation
  //    and prefetch included), its gradient buffer, the tied owners' buffers
  //    held across it (and the previous unit's with two buffers), and the
  //    pieces still landing;
  //  - each of its reduction's pieces: the live units after its release,
  //    the same gradient buffers, its fp32 staging and the pieces landing
  //    then (with bf16 gradients that piece's rounded copy too), counted
  //    piece by piece in backward order.
  // Never more than the sum of the columns.
  if (in.pp == 1 && stage >= 2) {
    // A tied owner's buffer lives from the first of it and its tying units
    // in backward order (the highest index) to the last (the lowest).
    std::vector<int64_t> owner_lo(static_cast<size_t>(n), n), owner_hi(static_cast<size_t>(n), -1);
    for (int u = 0; u < n; ++u) {
      if (!runs[static_cast<size_t>(u)]) continue;
      for (int t : tied_units(m.units[static_cast<size_t>(u)])) {
        owner_lo[static_cast<size_t>(t)] = std::min<int64_t>({owner_lo[static_cast<size_t>(t)], t, u});
        owner_hi[static_cast<size_t>(t)] = std::max<int64_t>({owner_hi[static_cast<size_t>(t)], t, u});
      }
    }
    const int k = GradLanding::kDefaultInFlight;
    std::vector<int64_t> landed;  // piece sizes in elements, in backward order
    auto landing = [&](size_t count) {  // bytes of the last `count` pieces landed
      int64_t sum = 0;
      for (size_t i = landed.size() > count ? landed.size() - count : 0; i < landed.size(); ++i) sum += landed[i];
      return sum * in.host_grad_bytes;
    };
    const int64_t grads_peak = (held_owner + nbuf * other_max) * 4;  // the buffers of the units in backward
    int64_t var = live.forward * pb;  // the forward
    std::string at_what = "the end of the forward";
    auto moment = [&](int64_t bytes, const std::string& what) {
      if (bytes > var) {
        var = bytes;
        at_what = what;
      }
    };
    int prev = -1;                    // the unit before in backward order
    for (int v = n - 1; v >= 0; --v) {
      if (!runs[static_cast<size_t>(v)]) continue;
      int64_t g = 0;
      for (int o = 0; o < n; ++o)
        if (held[static_cast<size_t>(o)] && owner[static_cast<size_t>(o)] && owner_lo[static_cast<size_t>(o)] <= v &&
            v <= owner_hi[static_cast<size_t>(o)])
          g += padded_of(o);
      if (!owner[static_cast<size_t>(v)]) g += padded_of(v);
      if (nbuf > 1 && prev >= 0 && !owner[static_cast<size_t>(prev)]) g += padded_of(prev);
      g *= 4;
      const size_t before = static_cast<size_t>(host_grads ? k : 0);
      const std::string& name = m.units[static_cast<size_t>(v)].name;
      moment((live.at_acquire.empty() ? 0 : live.at_acquire[static_cast<size_t>(v)] * pb) + g + landing(before),
             name + "'s backward");
      const int64_t after = live.after_release.empty() ? 0 : live.after_release[static_cast<size_t>(v)] * pb;
      // Its fp32 staging, and with two buffers the unit before's, still
      // staged when it went in one piece.
      const int64_t prev_piece = prev >= 0 ? padded_of(prev) / n_layout : 0;
      const int64_t fp32_staging =
          staged ? staging(padded_of(v)) + (nbuf > 1 && prev_piece <= c_cap ? prev_piece * 4 : 0) : 0;
      if (!staged) moment(after + g, name + "'s backward");
      const bool bf16_landing = host_grads && in.host_grad_bytes == 2;
      for (int64_t left = padded_of(v) / n_layout; staged && left > 0; left -= c_cap) {
        // fp32: the staged piece beside the k before it in flight; bf16:
        // also this piece's rounded copy.
        if (bf16_landing) landed.push_back(std::min(left, c_cap));
        moment(after + g + fp32_staging + landing(host_grads ? k + (bf16_landing ? 1 : 0) : 0), name + "'s reduction");
        if (host_grads && !bf16_landing) landed.push_back(std::min(left, c_cap));
      }
      prev = v;
    }
    // Several micro-batches a step one at a time: the next forward may start
    // while the last pieces land.
    if (host_grads && in.micro_batches_per_step > 1 && sc.in_flight == 1)
      moment(live.forward * pb + landing(static_cast<size_t>(k)), "the next forward while the last pieces land");
    // Publishing the updated shards (stage 2), after the backward.
    moment(publish, "the publishing of the updated shards");
    const int64_t fixed = r.total() - live_peak * pb - grads_peak - std::max(comm_red, publish);
    r.device_total = std::min(r.total(), fixed + var);
    r.device_peak_at = at_what;
  }
  return r;
}

}  // namespace

std::vector<int> StageContents::units() const {
  std::vector<int> out;
  for (const std::vector<int>& chunk : chunks) out.insert(out.end(), chunk.begin(), chunk.end());
  if (mirror >= 0) out.push_back(mirror);
  std::sort(out.begin(), out.end());
  return out;
}

StageContents whole_model(const ModelDesc& m) {
  StageContents sc;
  sc.chunks.emplace_back();
  for (int u = 0; u < m.num_units(); ++u) sc.chunks.back().push_back(u);
  return sc;
}

void EstimateInput::validate() const {
  model.shape.validate();
  ZT_CHECK(dp >= 1 && pp >= 1 && world == dp * pp, "world ", world, " must be dp ", dp, " x pp ", pp);
  if (pp > model.shape.n_layer)
    ZT_USER_ERROR("pipeline size ", pp, " exceeds the ", model.shape.n_layer, " layers");
  ZT_CHECK(stages.empty() ? pp == 1 : static_cast<int>(stages.size()) == pp, stages.size(), " stage contents for pp ",
           pp);
  for (const StageContents& sc : stages) {
    ZT_CHECK(!sc.chunks.empty() && sc.in_flight >= 1, "a pipeline stage without chunks or micro-batches");
    for (const std::vector<int>& chunk : sc.chunks)
      ZT_CHECK(!chunk.empty() && chunk.front() >= 0 && chunk.back() < model.num_units(),
               "a chunk of units outside the ", model.num_units(), " units of ", model.shape.name);
  }
  ZT_CHECK(zero_stage >= 0 && zero_stage <= 3, "ZeRO stage ", zero_stage);
  ZT_CHECK(valid_device(offload_optimizer) && valid_device(offload_param), "offload devices '",
           offload_optimizer, "', '", offload_param, "'");
  ZT_CHECK(param_dtype == DType::f32 || param_dtype == DType::bf16 || param_dtype == DType::f16,
           "parameter dtype ", dtype_name(param_dtype));
  ZT_CHECK(micro_batch >= 1, "micro_batch ", micro_batch);
  ZT_CHECK(reduce_bucket_size > 0 && allgather_bucket_size > 0 && sub_group_size > 0, "bucket sizes must be > 0");
  ZT_CHECK(nvme_alignment > 0 && param_nvme_alignment > 0, "NVMe alignments ", nvme_alignment, ", ",
           param_nvme_alignment);
}

std::vector<MemoryEstimateRow> estimate_stages(const EstimateInput& in) {
  in.validate();
  std::string unsupported;
  if (in.zero_stage == 0 && (offloaded(in.offload_optimizer) || offloaded(in.offload_param)))
    unsupported = "offload needs ZeRO stage >= 1";
  else if (in.zero_stage != 3 && offloaded(in.offload_param))
    unsupported = "offload_param needs ZeRO stage 3";
  std::vector<MemoryEstimateRow> rows;
  for (int st = 0; st < in.pp; ++st) {
    MemoryEstimateRow r;
    if (unsupported.empty()) {
      r = estimate_stage(in, in.stages.empty() ? whole_model(in.model) : in.stages[static_cast<size_t>(st)], st);
    } else {
      r.supported = false;
      r.note = unsupported;
      r.pp_stage = st;
    }
    r.zero_stage = in.zero_stage;
    r.offload_optimizer = in.offload_optimizer;
    r.offload_param = in.offload_param;
    r.num_params = in.model.num_params();
    rows.push_back(r);
  }
  return rows;
}

MemoryEstimateRow estimate(const EstimateInput& in) {
  const std::vector<MemoryEstimateRow> rows = estimate_stages(in);
  size_t best = 0;
  for (size_t st = 1; st < rows.size(); ++st)
    if (rows[st].total() > rows[best].total()) best = st;
  return rows[best];
}

std::vector<MemoryEstimateRow> estimate_table(const EstimateInput& base) {
  struct Combo {
    int stage;
    const char* opt;
    const char* param;
  };
  static const Combo combos[] = {
      {0, "none", "none"}, {0, "cpu", "none"}, {0, "nvme", "none"},  {1, "none", "none"},
      {1, "cpu", "none"},  {1, "nvme", "none"}, {2, "none", "none"}, {2, "cpu", "none"},
      {2, "nvme", "none"}, {3, "none", "none"}, {3, "cpu", "none"},  {3, "cpu", "cpu"},
      {3, "nvme", "nvme"}};
  std::vector<MemoryEstimateRow> rows;
  for (const Combo& c : combos) {
    EstimateInput in = base;
    in.zero_stage = c.stage;
    in.offload_optimizer = c.opt;
    in.offload_param = c.param;
    rows.push_back(estimate(in));
  }
  return rows;
}

}  // namespace zt
