#include "zero/estimator.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"

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
//            its end (kept until then with overlap_comm, so one more unit).
//            A tied parameter's owner keeps its buffer from the tying unit's
//            backward to its own (GPT-2: wte through the whole backward).
//   stage 3: also the working parameters over the shard (none in fp32: the
//            master shard is the working shard), plus the live gathered
//            units ([Note: stage-3 live parameters]); units smaller than
//            stage3_param_persistence_threshold stay whole.
// Communication staging: stage 0 all-reduces in place; stages >= 1 stage one
// reduce bucket (fp32); stages 1-2 one all-gather bucket (parameter dtype)
// for publishing the updated shards, stage 3 one for units gathered in pieces.
// Offload (stage >= 1): offload_optimizer moves master, m, v and the fp32
// gradient shard off the device; the full-size buffers of stages 1-3 stay.
// The CPU optimizer keeps an fp32 master on the host, so the host holds
// 12 + 4 bytes per owned element. cpu: pinned host memory; nvme: the NVMe
// file, staged through buffer_count host buffers of one sub-group
// (min(sub_group_size, S)) fp32 elements, as DeepSpeed's optimizer swapper
// does. offload_param (stage 3): the parameter shard goes to host memory or
// NVMe; nvme stages it through buffer_count buffers of max(buffer_size,
// largest unit) elements.
// Activations: see the comment of block_saved_bytes_per_token.

namespace zt {
namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
int64_t norm_params(const TransformerShape& s) { return s.norm == "layernorm" ? 2 * s.d_model : s.d_model; }
// fp32 statistics per token a norm keeps: mean and rstd, or rstd alone.
int64_t norm_stats(const TransformerShape& s) { return s.norm == "layernorm" ? 2 : 1; }
// Pre-activation width of the MLP: fch (F), or gate and up (2F).
int64_t mlp_pre_width(const TransformerShape& s) { return s.gated_mlp ? 2 * s.ffn_hidden : s.ffn_hidden; }
bool offloaded(const std::string& device) { return device != "none"; }
bool valid_device(const std::string& d) { return d == "none" || d == "cpu" || d == "nvme"; }

// A unit as placed on one pipeline stage; `runs` is false for the copy of a
// tied parameter that the last stage holds for its head.
struct StageUnit {
  UnitParams p;
  bool runs = true;
  bool block = false;
};

// The units of pipeline stage `stage` of `pp`: blocks split as evenly as
// possible (earlier stages take the remainder), the embedding on the first
// stage, the head on the last. A tied head on another stage than the
// embedding keeps its own copy of the tied parameter (as Megatron does).
std::vector<StageUnit> stage_units(const TransformerShape& s, int pp, int stage) {
  const std::vector<UnitParams> all = unit_params(s);
  const int64_t L = s.n_layer, q = L / pp, r = L % pp;
  const int64_t b0 = stage * q + std::min<int64_t>(stage, r), b1 = b0 + q + (stage < r ? 1 : 0);
  std::vector<StageUnit> out;
  if (stage == 0) out.push_back({all.front(), true, false});
  for (int64_t b = b0; b < b1; ++b) out.push_back({all[static_cast<size_t>(1 + b)], true, true});
  if (stage == pp - 1) {
    UnitParams head = all.back();
    if (head.tied_unit >= 0 && stage != 0) {
      out.push_back({UnitParams{"tied copy", head.tied_numel, -1, 0}, false, false});
      head.tied_unit = static_cast<int>(out.size()) - 1;
    }
    out.push_back({head, true, false});
  }
  return out;
}

// [Note: stage-3 live parameters] Replays ZeroEngine's gather policy over
// one step from the unit sizes alone: acquire gathers the unit and the units
// it ties to, then prefetches the next partitioned units in the direction of
// travel while they fit whole in stage3_prefetch_bucket_size and keep the
// live total within stage3_max_live_parameters; release keeps a unit gathered
// when its next use comes within stage3_max_reuse_distance elements (forward:
// twice the parameters of the later units; a recomputation: at once; a tied
// unit released by a later one in backward: the units between them) and the
// live total allows, and frees it otherwise. Returns the peak live elements.
int64_t live_parameters(const std::vector<StageUnit>& u, const EstimateInput& in, bool checkpointing) {
  const int n = static_cast<int>(u.size());
  auto partitioned = [&](int v) { return u[v].p.numel >= in.stage3_param_persistence_threshold; };
  auto size = [&](int v) { return round_up(u[v].p.numel, in.dp); };
  std::vector<bool> gathered(static_cast<size_t>(n), false);
  int64_t live = 0, peak = 0;
  auto gather = [&](int v) {
    if (gathered[v]) return;
    gathered[v] = true;
    live += size(v);
    peak = std::max(peak, live);
  };
  auto needed = [&](int v) {
    std::vector<int> list{v};
    if (u[v].p.tied_unit >= 0) list.push_back(u[v].p.tied_unit);
    return list;
  };
  enum class Pass { forward, backward, recompute };
  auto acquire = [&](int v, Pass pass) {
    for (int w : needed(v))
      if (partitioned(w)) gather(w);
    if (!partitioned(v)) return;
    const int step = pass == Pass::forward ? 1 : -1;
    int64_t budget = in.stage3_prefetch_bucket_size;
    for (int w = v + step; w >= 0 && w < n && budget > 0; w += step) {
      if (!partitioned(w) || gathered[w] || !u[w].runs) continue;
      if (size(w) > budget || live + size(w) > in.stage3_max_live_parameters) break;
      gather(w);
      budget -= size(w);
    }
  };
  auto release = [&](int v, Pass pass) {
    for (int w : needed(v)) {
      if (!partitioned(w) || !gathered[w]) continue;
      int64_t distance = -1;  // not used again this step
      if (pass == Pass::recompute) {
        distance = 0;
      } else if (pass == Pass::forward) {
        distance = 0;
        for (int x = v + 1; x < n; ++x) distance += 2 * u[x].p.numel;
      } else if (w != v) {
        distance = 0;
        for (int x = w + 1; x < v; ++x) distance += u[x].p.numel;
      }
      if (distance < 0 || distance > in.stage3_max_reuse_distance || live > in.stage3_max_live_parameters) {
        gathered[w] = false;
        live -= size(w);
      }
    }
  };
  for (int v = 0; v < n; ++v) {
    if (!u[v].runs) continue;
    acquire(v, Pass::forward);
    release(v, Pass::forward);
  }
  for (int v = n - 1; v >= 0; --v) {
    if (!u[v].runs) continue;
    if (checkpointing && u[v].block) {
      acquire(v, Pass::recompute);
      release(v, Pass::recompute);
    }
    acquire(v, Pass::backward);
    release(v, Pass::backward);
  }
  return peak;
}

MemoryEstimateRow estimate_stage(const EstimateInput& in, int pp_stage) {
  const TransformerShape& s = in.shape;
  const std::vector<StageUnit> units = stage_units(s, in.pp, pp_stage);
  const bool last = pp_stage == in.pp - 1;
  const int stage = in.zero_stage;
  const bool f32 = in.param_dtype == DType::f32;
  const int64_t pb = static_cast<int64_t>(dtype_size(in.param_dtype)), a = pb;
  const int64_t n_layout = stage == 0 ? 1 : in.dp;

  MemoryEstimateRow r;
  r.pp_stage = pp_stage;
  // padded: all units; persistent: stage-3 units kept whole; unit_max: the
  // largest unit; held: a tied parameter's owner, whose gradient buffer
  // (stages 2-3) lives from the tying unit's backward to its own.
  int64_t padded = 0, persistent = 0, unit_max = 0, held = 0, other_max = 0;
  std::vector<bool> owner(units.size(), false);
  for (const StageUnit& u : units)
    if (u.p.tied_unit >= 0) owner[static_cast<size_t>(u.p.tied_unit)] = true;
  for (size_t i = 0; i < units.size(); ++i) {
    const int64_t numel = units[i].p.numel, p = round_up(numel, n_layout);
    r.stage_params += numel;
    padded += p;
    unit_max = std::max(unit_max, p);
    if (numel < in.stage3_param_persistence_threshold) persistent += p;
    if (owner[i])
      held += p;
    else
      other_max = std::max(other_max, p);
  }
  const int64_t shard = padded / n_layout;
  const int nbuf = in.overlap_comm.value_or(stage == 3) ? 2 : 1;

  // Parameters: replicated below stage 3. Stage 3: the units kept whole, the
  // live gathered units, and the working shard of every unit (none in fp32,
  // where the fp32 master shard is the working shard).
  if (stage < 3) {
    r.params = padded * pb;
  } else {
    r.params = (persistent + live_parameters(units, in, in.activation_checkpointing)) * pb;
    const int64_t working_shard = f32 ? 0 : shard * pb;
    if (in.offload_param == "none") r.params += working_shard;
    if (in.offload_param == "cpu") r.host += shard * pb;
    if (in.offload_param == "nvme") {
      r.nvme += shard * pb;
      r.host += in.param_buffer_count * std::max(in.param_buffer_size, unit_max) * pb;
    }
  }

  // Gradients: stage 0 full; stage 1 full + owned shard; stages 2-3 the owned
  // shard + the full-size buffers of the units in backward (the held tied
  // owner, the current unit, and with overlap_comm the previous one still
  // being reduce-scattered).
  int64_t device_grads = stage <= 1 ? padded : held + nbuf * other_max;
  const int64_t grad_shard = stage == 0 ? 0 : shard;
  // Optimizer: stage 0 keeps a master only for 16-bit parameters; stages >= 1
  // keep an fp32 master shard whatever the dtype.
  const int64_t K = stage == 0 ? (f32 ? 8 : 12) : 12;
  if (!offloaded(in.offload_optimizer)) {
    device_grads += grad_shard;
    r.optimizer = K * shard;
  } else {
    const int64_t moved = (12 + 4) * shard;  // master, m, v, gradient shard
    if (in.offload_optimizer == "cpu") {
      r.host += moved;
    } else {
      r.nvme += moved;
      r.host += in.optimizer_buffer_count * std::min(in.sub_group_size, shard) * 4;
    }
  }
  r.grads = device_grads * 4;

  // Communication staging (stage 0 all-reduces in place): one reduce bucket
  // (fp32) and, where units are all-gathered in pieces, one all-gather bucket.
  if (stage >= 1) r.comm = std::min(in.reduce_bucket_size, stage == 1 ? padded : unit_max) * 4;
  if (stage == 1 || stage == 2) r.comm += std::min(in.allgather_bucket_size, padded) * pb;
  if (stage == 3 && unit_max > in.allgather_bucket_size) r.comm += in.allgather_bucket_size * pb;

  // Activations of one micro-batch per token, times the micro-batches in
  // flight on this stage (1F1B: pp - stage).
  const int64_t C = s.d_model, tokens = in.micro_batch * s.seq_len;
  int64_t blocks = 0;
  for (const StageUnit& u : units) blocks += u.block ? 1 : 0;
  const int64_t block_saved = block_saved_bytes_per_token(s, a);
  int64_t per_token = 12;  // tokens, targets (i32), loss weights (f32)
  per_token += C * a;      // the embedding's output, or the input received from the previous stage
  per_token += blocks * (in.activation_checkpointing ? C * a : block_saved);
  if (last) per_token += 4 + C * a + (norm_stats(s) + 1) * 4;  // loss, final norm + stats, lse
  r.activations = (in.pp - pp_stage) * tokens * per_token;

  // Workspace: two fp32 activation-gradient buffers (B, T, C) for the whole
  // backward, plus the larger of one block's backward (with its recomputed
  // stash under checkpointing) and the head's (dlnf + one logits chunk).
  int64_t ws_block = 0, ws_head = 0;
  if (blocks > 0)
    ws_block = tokens * (block_backward_bytes_per_token(s, a) + (in.activation_checkpointing ? block_saved : 0));
  if (last) {
    const int64_t rows = std::clamp<int64_t>(in.classifier_chunk_bytes / (s.vocab * 4), 1, tokens);
    ws_head = tokens * C * 4 + rows * s.vocab * 4;
  }
  r.workspace = tokens * 2 * C * 4 + std::max(ws_block, ws_head);
  return r;
}

}  // namespace

void TransformerShape::validate() const {
  auto need = [&](bool ok, const char* what, int64_t v) {
    if (!ok) ZT_USER_ERROR("model shape ", name, ": ", what, ", got ", v);
  };
  need(n_layer >= 1, "n_layer must be >= 1", n_layer);
  need(n_head >= 1 && d_model >= 1 && d_model % n_head == 0, "d_model must be a positive multiple of n_head",
       d_model);
  need(n_kv_head >= 1 && n_head % n_kv_head == 0, "n_kv_head must divide n_head", n_kv_head);
  need(ffn_hidden >= 1, "ffn_hidden must be >= 1", ffn_hidden);
  need(vocab >= 1, "vocab must be >= 1", vocab);
  need(seq_len >= 1, "seq_len must be >= 1", seq_len);
  if (norm != "layernorm" && norm != "rmsnorm")
    ZT_USER_ERROR("model shape ", name, ": norm must be layernorm or rmsnorm, got '", norm, "'");
}

TransformerShape gpt_shape(const GptConfig& cfg) {
  TransformerShape s;
  s.name = "gpt2";
  s.n_layer = cfg.n_layer;
  s.d_model = cfg.d_model;
  s.n_head = s.n_kv_head = cfg.n_head;
  s.ffn_hidden = 4 * s.d_model;
  s.vocab = cfg.vocab_size;
  s.seq_len = cfg.seq_len;
  return s;  // the remaining defaults are GPT-2's
}

TransformerShape llama2_70b_shape() {
  TransformerShape s;
  s.name = "llama2-70b";
  s.n_layer = 80;
  s.d_model = 8192;
  s.n_head = 64;
  s.n_kv_head = 8;
  s.ffn_hidden = 28672;
  s.vocab = 32000;
  s.seq_len = 4096;
  s.tied_embeddings = false;
  s.gated_mlp = true;
  s.learned_positions = false;
  s.biases = false;
  s.norm = "rmsnorm";
  return s;
}

int64_t block_parameters(const TransformerShape& s) {
  const int64_t C = s.d_model, F = s.ffn_hidden, Q = s.qkv_width(), bias = s.biases ? 1 : 0;
  int64_t n = 2 * norm_params(s);  // ln_1, ln_2
  n += Q * C + bias * Q;           // c_attn (fused q, k, v)
  n += C * C + bias * C;           // attention output projection
  if (s.gated_mlp)
    n += 3 * C * F + bias * (2 * F + C);  // gate, up, down
  else
    n += 2 * C * F + bias * (F + C);  // c_fc, c_proj
  return n;
}

std::vector<UnitParams> unit_params(const TransformerShape& s) {
  s.validate();
  const int64_t C = s.d_model, V = s.vocab;
  std::vector<UnitParams> u;
  u.push_back({"embedding", V * C + (s.learned_positions ? s.seq_len * C : 0), -1, 0});
  for (int64_t l = 0; l < s.n_layer; ++l) u.push_back({"h." + std::to_string(l), block_parameters(s), -1, 0});
  if (s.tied_embeddings)
    u.push_back({"head", norm_params(s), 0, V * C});
  else
    u.push_back({"head", norm_params(s) + V * C, -1, 0});
  return u;
}

int64_t count_parameters(const TransformerShape& s) {
  int64_t n = 0;
  for (const UnitParams& u : unit_params(s)) n += u.numel;
  return n;
}

// What a block keeps per token (modules/block.cpp), in the activation dtype:
// ln_1 out C, qkv (C + 2 C kv/heads), attention out C, residual C, ln_2 out
// C, MLP pre-activation (F, or gate and up 2F: the activation itself is
// recomputed in backward, as block.cpp does with GELU), and the block output
// C (kept by the runner; the next unit's input). GPT-2: 12C. In fp32: the
// norms' statistics (mean + rstd per LayerNorm, rstd per RMSNorm) and the
// attention's log-sum-exp per head (flash-style: no T x T probabilities).
int64_t block_saved_bytes_per_token(const TransformerShape& s, int64_t act) {
  const int64_t C = s.d_model;
  const int64_t values = C + s.qkv_width() + C + C + C + mlp_pre_width(s) + C;
  return values * act + (2 * norm_stats(s) + s.n_head) * 4;
}

// Backward temporaries of one block (block.cpp; the arena frees them only at
// the unit's end): the recomputed activation output F (activation dtype), the
// MLP pre-activation gradient, the norm-input gradient C and dqkv, in fp32.
// The CPU reference kernels also stage 16-bit operands, weights included,
// into fp32 copies; the GPU path does not, and neither is counted.
int64_t block_backward_bytes_per_token(const TransformerShape& s, int64_t act) {
  return s.ffn_hidden * act + (mlp_pre_width(s) + s.d_model + s.qkv_width()) * 4;
}

void EstimateInput::validate() const {
  shape.validate();
  ZT_CHECK(dp >= 1 && pp >= 1 && world == dp * pp, "world ", world, " must be dp ", dp, " x pp ", pp);
  if (pp > shape.n_layer) ZT_USER_ERROR("pipeline size ", pp, " exceeds the ", shape.n_layer, " layers");
  ZT_CHECK(zero_stage >= 0 && zero_stage <= 3, "ZeRO stage ", zero_stage);
  ZT_CHECK(valid_device(offload_optimizer) && valid_device(offload_param), "offload devices '",
           offload_optimizer, "', '", offload_param, "'");
  ZT_CHECK(param_dtype == DType::f32 || param_dtype == DType::bf16 || param_dtype == DType::f16,
           "parameter dtype ", dtype_name(param_dtype));
  ZT_CHECK(micro_batch >= 1, "micro_batch ", micro_batch);
  ZT_CHECK(reduce_bucket_size > 0 && allgather_bucket_size > 0 && sub_group_size > 0, "bucket sizes must be > 0");
}

MemoryEstimateRow estimate(const EstimateInput& in) {
  in.validate();
  MemoryEstimateRow best;
  if (in.zero_stage == 0 && (offloaded(in.offload_optimizer) || offloaded(in.offload_param))) {
    best.supported = false;
    best.note = "offload needs ZeRO stage >= 1";
  } else if (in.zero_stage != 3 && offloaded(in.offload_param)) {
    best.supported = false;
    best.note = "offload_param needs ZeRO stage 3";
  } else {
    for (int st = 0; st < in.pp; ++st) {
      MemoryEstimateRow r = estimate_stage(in, st);
      if (st == 0 || r.total() > best.total()) best = r;
    }
  }
  best.zero_stage = in.zero_stage;
  best.offload_optimizer = in.offload_optimizer;
  best.offload_param = in.offload_param;
  best.num_params = count_parameters(in.shape);
  return best;
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

namespace {

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string format_estimate_table(const EstimateInput& base, const std::vector<MemoryEstimateRow>& rows) {
  // GiB, or MiB when no device total reaches 1 GiB (small models).
  int64_t largest = 0;
  for (const MemoryEstimateRow& r : rows) largest = std::max(largest, r.total());
  const bool gib = largest >= (int64_t{1} << 30);
  const double unit = gib ? double(int64_t{1} << 30) : double(1 << 20);
  const TransformerShape& s = base.shape;
  const int64_t n = count_parameters(s);
  std::ostringstream os;
  char buf[256];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(n) / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.2f M", static_cast<double>(n) / 1e6);
  os << "memory per rank (" << (gib ? "GiB" : "MiB") << "): " << s.name << ", " << format_count(n) << " parameters ("
     << buf << "), " << s.n_layer << " layers, d_model " << s.d_model << ", " << s.n_head << " heads";
  if (s.n_kv_head != s.n_head) os << " (" << s.n_kv_head << " kv)";
  os << ", ffn " << s.ffn_hidden << ", vocab " << s.vocab << "\n"
     << "  " << base.world << " ranks = dp " << base.dp << " x pp " << base.pp << "; " << dtype_name(base.param_dtype)
     << " parameters and activations; micro-batch " << base.micro_batch << " x seq " << s.seq_len
     << "; activation checkpointing " << (base.activation_checkpointing ? "on" : "off") << "\n";
  std::snprintf(buf, sizeof buf, "%-5s %-10s %8s %8s %8s %8s %8s %8s %8s %9s %10s %9s\n", "stage", "offload", "params",
                "grads", "optim", "states", "activ", "comm", "work", "DEVICE", "host", "nvme");
  os << buf;
  for (const MemoryEstimateRow& r : rows) {
    const std::string off = r.zero_stage == 3 ? r.offload_optimizer + "/" + r.offload_param : r.offload_optimizer;
    if (!r.supported) {
      std::snprintf(buf, sizeof buf, "%-5d %-10s   n/a: %s\n", r.zero_stage, off.c_str(), r.note.c_str());
      os << buf;
      continue;
    }
    auto g = [&](int64_t b) { return static_cast<double>(b) / unit; };
    std::snprintf(buf, sizeof buf, "%-5d %-10s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %10.2f %9.2f",
                  r.zero_stage, off.c_str(), g(r.params), g(r.grads), g(r.optimizer), g(r.model_states()),
                  g(r.activations), g(r.comm), g(r.workspace), g(r.total()), g(r.host), g(r.nvme));
    os << buf;
    if (base.pp > 1) os << "  (pipeline stage " << r.pp_stage << ")";
    os << "\n";
  }
  os << "  states = params + grads + optim; DEVICE = states + activ + comm + work; host and nvme are per rank\n"
     << "  (a node needs them times its ranks). Offload column: optimizer (stage 3: optimizer/parameters).\n";
  std::snprintf(buf, sizeof buf,
                "  buckets (elements): reduce %.3g, allgather %.3g; stage 3: prefetch %.3g, max live %.3g, "
                "reuse distance %.3g, persistence %.3g; overlap_comm %s\n",
                double(base.reduce_bucket_size), double(base.allgather_bucket_size),
                double(base.stage3_prefetch_bucket_size), double(base.stage3_max_live_parameters),
                double(base.stage3_max_reuse_distance), double(base.stage3_param_persistence_threshold),
                base.overlap_comm ? (*base.overlap_comm ? "on" : "off") : "stage 3 only (DeepSpeed's default)");
  os << buf;
  if (base.pp > 1)
    os << "  pipeline: the stage needing most is shown; 1F1B keeps pp - s micro-batches in flight on stage s\n";
  return os.str();
}

std::string llama2_70b_table(int world) {
  ZT_CHECK(world >= 1, "world ", world);
  EstimateInput in;
  in.shape = llama2_70b_shape();
  in.world = in.dp = world;
  in.param_dtype = DType::bf16;
  in.micro_batch = 1;
  std::string out;
  for (bool ckpt : {false, true}) {
    in.activation_checkpointing = ckpt;
    out += format_estimate_table(in, estimate_table(in));
    if (!ckpt) out += "\n";
  }
  return out;
}

}  // namespace zt
