// Causal attention on cuDNN's fused attention kernels ([Note: two attention
// paths] in attention_cudnn.cuh): built cudnn-frontend graphs, cached per
// shape; the two small kernels around the backward (dout rounded to the
// storage dtype where it comes in f32, 16-bit gradients widened into the f32
// outputs) are in attention_cudnn_cast.cu. Host code only, compiled by the C++ compiler:
// through nvcc this file took about 210 s of a 2-core CI machine, through
// g++ 42 s at -O1 (attention.cmake).
//
// Compiled with ZT_HAVE_CUDNN=1 when CMake found the cudnn-frontend headers
// and libcudnn (modules/cuda/attention.cmake); without, cudnn_fwd and
// cudnn_bwd always decline and the flash kernels run.
#include "modules/cuda/attention_cudnn.cuh"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "modules/cuda/attention_args.hpp"
#include "modules/cuda/attention_cudnn_cast.cuh"

#ifndef ZT_HAVE_CUDNN
#define ZT_HAVE_CUDNN 0
#endif

#if ZT_HAVE_CUDNN
#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace zt {
namespace {

std::atomic<uint64_t> g_cudnn_calls{0};

// ZTRAIN_ATTENTION, read at every call (a test switches paths with setenv):
// unset or empty means cudnn where this build has it, flash otherwise;
// cudnn-nondeterministic is cudnn with cuDNN's faster backward, whose
// gradients may differ in the last bits from run to run (PyTorch's default;
// the deterministic one keeps dP in a workspace). The flash kernels are
// always deterministic.
enum class Path { flash, cudnn, cudnn_nondeterministic };

Path selected_path() {
  const char* env = std::getenv("ZTRAIN_ATTENTION");
  if (env == nullptr || *env == '\0') return ZT_HAVE_CUDNN ? Path::cudnn : Path::flash;
  if (std::strcmp(env, "flash") == 0) return Path::flash;
  const bool nondet = std::strcmp(env, "cudnn-nondeterministic") == 0;
  if (nondet || std::strcmp(env, "cudnn") == 0) {
    if (!ZT_HAVE_CUDNN)
      ZT_USER_ERROR("ZTRAIN_ATTENTION=", env, ": this build has no cuDNN (CMake found no cudnn-frontend headers or "
                    "no libcudnn; see ZT_CUDNN_FRONTEND_INCLUDE in docs/cuda.md); use flash");
    return nondet ? Path::cudnn_nondeterministic : Path::cudnn;
  }
  ZT_USER_ERROR("ZTRAIN_ATTENTION=", env, ": unknown attention path; use flash, cudnn or cudnn-nondeterministic");
}

bool cudnn_selected() { return selected_path() != Path::flash; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The shapes and layouts cuDNN's fused kernels take (see the Note): hs a
// multiple of 8 up to 128, 16-byte aligned rows, more than one token.
bool shape_fits(const attn::Dims& d, const void* q, const void* k, const void* v) {
  return d.hs % 8 == 0 && d.hs <= 128 && d.T >= 2 && d.ld_q % 8 == 0 && d.ld_kv % 8 == 0 && aligned16(q) &&
         aligned16(k) && aligned16(v);
}

#if ZT_HAVE_CUDNN

// `bytes` of workspace from the arena (64-byte aligned), or null for none.
void* alloc_bytes(Arena& ws, int64_t bytes) {
  if (bytes <= 0) return nullptr;
  const Tensor t = ws.alloc(DType::u16, Shape{(bytes + 1) / 2});
  ZT_CHECK(t.device == DeviceKind::cuda && t.data != nullptr,
           "attention on cuDNN: the workspace arena must be in CUDA memory");
  return t.data;
}

namespace fe = cudnn_frontend;

// [Note: cuDNN graph cache] A built graph (operation graph plus execution
// plan) is specific to the device, the direction, the dtype and every dim
// and stride, and building one costs milliseconds to seconds, so each is
// built once per process and kept; a shape cuDNN refuses is kept as a null
// graph, so it is asked (and logged) once. One cuDNN handle per device. One
// mutex serialises everything: a call holds it only to look up the graph,
// bind the handle to the caller's stream and enqueue the work.
struct Key {
  int device;
  bool bwd;
  DType t;
  int B, T, NH, NKV, hs;
  int64_t ld_q, ld_kv;
  bool deterministic;  // the backward's algorithm (true for every forward)
  int64_t ld_g;        // the backward's 16-bit gradients' row stride (BwdArgs::ld_g16): 0 for dense ones
  bool operator<(const Key& o) const {
    return std::tie(device, bwd, t, B, T, NH, NKV, hs, ld_q, ld_kv, deterministic, ld_g) <
           std::tie(o.device, o.bwd, o.t, o.B, o.T, o.NH, o.NKV, o.hs, o.ld_q, o.ld_kv, o.deterministic, o.ld_g);
  }
};

struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused the shape
  int64_t workspace = 0;                    // bytes
};

struct Handle {
  cudnnHandle_t h = nullptr;  // null: cudnnCreate failed on this device
};

struct State {
  std::mutex mu;
  std::map<int, Handle> handles;
  std::map<Key, Entry> graphs;
};

// Never destroyed: static destruction at exit would tear the handles and
// plans down after the CUDA runtime may already have shut down.
State& state() {
  static State* s = new State;
  return *s;
}

enum Uid : fe::graph::Tensor_attributes::uid_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

fe::DataType_t fe_type(DType t) { return t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

// A (B, heads, T, hs) view of a row-major (B, T, columns) matrix of row
// stride ld whose head h starts at column h * hs: dims and strides.
std::vector<int64_t> bhsd_dim(const attn::Dims& d, int heads) { return {d.B, heads, d.T, d.hs}; }
std::vector<int64_t> bhsd_stride(const attn::Dims& d, int64_t ld) {
  return {static_cast<int64_t>(d.T) * ld, d.hs, ld, 1};
}
fe::graph::Tensor_attributes bhsd(const char* name, Uid uid, DType t, const attn::Dims& d, int heads, int64_t ld) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_data_type(fe_type(t))
      .set_dim(bhsd_dim(d, heads))
      .set_stride(bhsd_stride(d, ld));
}

// lse (B, NH, T) f32 as cuDNN's Stats (B, NH, T, 1).
std::vector<int64_t> stats_dim(const attn::Dims& d) { return {d.B, d.NH, d.T, 1}; }
std::vector<int64_t> stats_stride(const attn::Dims& d) { return {static_cast<int64_t>(d.NH) * d.T, d.T, 1, 1}; }

// Same as the flash kernels' 1 / sqrtf(hs).
float attn_scale(const attn::Dims& d) { return 1.0f / std::sqrt(static_cast<float>(d.hs)); }

std::shared_ptr<fe::graph::Graph> new_graph(DType t) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(t))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// out (B, T, NH * hs) dense, Stats (B, NH, T) f32: causal (query t sees keys
// 0..t: the band's right bound 0 on the top-left diagonal).
std::shared_ptr<fe::graph::Graph> fwd_graph(const attn::Dims& d, DType t) {
  auto g = new_graph(t);
  auto Q = g->tensor(bhsd("Q", kQ, t, d, d.NH, d.ld_q));
  auto K = g->tensor(bhsd("K", kK, t, d, d.NKV, d.ld_kv));
  auto V = g->tensor(bhsd("V", kV, t, d, d.NKV, d.ld_kv));
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("zt_attention_fwd")
                  .set_generate_stats(true)
                  .set_attn_scale(attn_scale(d))
                  .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                  .set_diagonal_band_right_bound(0);
  auto [O, Stats] = g->sdpa(Q, K, V, opts);
  O->set_output(true).set_uid(kO).set_data_type(fe_type(t)).set_dim(bhsd_dim(d, d.NH)).set_stride(
      bhsd_stride(d, d.C));
  Stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(stats_dim(d))
      .set_stride(stats_stride(d));
  return g;
}

// dq (B, T, NH * hs), dk, dv (B, T, NKV * hs), all dense in the storage
// dtype; deterministic ([Note: two attention paths]) unless the caller asks
// for cuDNN's non-deterministic algorithm (ZTRAIN_ATTENTION).
// ld_g > 0: all three gradients with that row stride (the packed buffer).
std::shared_ptr<fe::graph::Graph> bwd_graph(const attn::Dims& d, DType t, bool deterministic, int64_t ld_g) {
  auto g = new_graph(t);
  const int64_t Ckv = static_cast<int64_t>(d.NKV) * d.hs;
  auto Q = g->tensor(bhsd("Q", kQ, t, d, d.NH, d.ld_q));
  auto K = g->tensor(bhsd("K", kK, t, d, d.NKV, d.ld_kv));
  auto V = g->tensor(bhsd("V", kV, t, d, d.NKV, d.ld_kv));
  auto O = g->tensor(bhsd("O", kO, t, d, d.NH, d.C));
  auto dO = g->tensor(bhsd("dO", kdO, t, d, d.NH, d.C));
  auto Stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_data_type(fe::DataType_t::FLOAT)
                             .set_dim(stats_dim(d))
                             .set_stride(stats_stride(d)));
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("zt_attention_bwd")
                  .set_attn_scale(attn_scale(d))
                  .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                  .set_diagonal_band_right_bound(0)
                  .set_deterministic_algorithm(deterministic);
  auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
  dQ->set_output(true).set_uid(kdQ).set_data_type(fe_type(t)).set_dim(bhsd_dim(d, d.NH)).set_stride(
      bhsd_stride(d, ld_g > 0 ? ld_g : d.C));
  dK->set_output(true).set_uid(kdK).set_data_type(fe_type(t)).set_dim(bhsd_dim(d, d.NKV)).set_stride(
      bhsd_stride(d, ld_g > 0 ? ld_g : Ckv));
  dV->set_output(true).set_uid(kdV).set_data_type(fe_type(t)).set_dim(bhsd_dim(d, d.NKV)).set_stride(
      bhsd_stride(d, ld_g > 0 ? ld_g : Ckv));
  return g;
}

std::string key_str(const Key& k) {
  return detail::concat(k.bwd ? (k.deterministic ? "backward" : "non-deterministic backward") : "forward", " ",
                        dtype_name(k.t), " B=", k.B, " T=", k.T, " heads=", k.NH,
                        " kv_heads=", k.NKV, " hs=", k.hs, " ld_q=", k.ld_q, " ld_kv=", k.ld_kv);
}

// The device's handle, created at first use; null when cuDNN cannot run here.
cudnnHandle_t handle_for(State& s, int device) {
  auto it = s.handles.find(device);
  if (it != s.handles.end()) return it->second.h;
  Handle h;
  const cudnnStatus_t st = cudnnCreate(&h.h);
  if (st != CUDNN_STATUS_SUCCESS) {
    h.h = nullptr;
    log_warn("attention: cudnnCreate failed on device ", device, " (", cudnnGetErrorString(st),
             "); using the flash kernels");
  } else {
    log_info("attention: cuDNN ", cudnnGetVersion(), " fused attention on device ", device, " (cudnn-frontend ",
             CUDNN_FRONTEND_VERSION, "; ZTRAIN_ATTENTION=flash selects the flash kernels)");
  }
  s.handles.emplace(device, h);
  return h.h;
}

const Entry& entry_for(State& s, const Key& k, cudnnHandle_t h, const attn::Dims& d) {
  auto it = s.graphs.find(k);
  if (it != s.graphs.end()) return it->second;
  Entry e;
  std::string why;
  try {
    auto g = k.bwd ? bwd_graph(d, k.t, k.deterministic, k.ld_g) : fwd_graph(d, k.t);
    fe::error_t st = g->build(h, {fe::HeurMode_t::A});
    if (st.is_good()) {
      int64_t bytes = 0;
      st = g->get_workspace_size(bytes);
      if (st.is_good()) {
        e.graph = std::move(g);
        e.workspace = bytes;
      }
    }
    if (!e.graph) why = st.get_message();
  } catch (const std::exception& ex) {  // the frontend throws on some invalid graphs
    why = ex.what();
  }
  if (!e.graph)
    log_warn("attention: cuDNN has no fused attention for ", key_str(k), " (", why, "); using the flash kernels");
  return s.graphs.emplace(k, std::move(e)).first->second;
}

using Pack = std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*>;

// The graph of `k` (built at first use) and the device's handle, or null
// when cuDNN refused the shape or cannot run on this device. Entries are
// never erased, so the pointer stays valid.
const Entry* prepare(const Key& k, const attn::Dims& d, cudnnHandle_t* h) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mu);
  *h = handle_for(s, k.device);
  if (*h == nullptr) return nullptr;
  const Entry& e = entry_for(s, k, *h, d);
  return e.graph ? &e : nullptr;
}

// Enqueues the graph on `stream` with the given tensors; its workspace comes
// from `ws` (the caller's ArenaScope returns it).
void run(const Key& k, const Entry& e, cudnnHandle_t h, Pack& pack, Arena& ws, cudaStream_t stream) {
  void* work = alloc_bytes(ws, e.workspace);
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mu);
  const cudnnStatus_t st = cudnnSetStream(h, stream);
  ZT_CHECK(st == CUDNN_STATUS_SUCCESS, "attention on cuDNN: cudnnSetStream: ", cudnnGetErrorString(st));
  fe::error_t ex = e.graph->execute(h, pack, work);
  ZT_CHECK(ex.is_good(), "attention on cuDNN: executing the ", key_str(k), " graph failed: ", ex.get_message());
  g_cudnn_calls.fetch_add(1, std::memory_order_relaxed);
}

Key key_of(const attn::Dims& d, DType t, bool bwd, int64_t ld_g = 0) {
  int device = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  const bool deterministic = !bwd || selected_path() != Path::cudnn_nondeterministic;
  return Key{device, bwd, t, d.B, d.T, d.NH, d.NKV, d.hs, d.ld_q, d.ld_kv, deterministic, ld_g};
}

#endif  // ZT_HAVE_CUDNN

}  // namespace

namespace attn {

bool cudnn_fwd(const FwdArgs& a, DType t, Arena& ws, cudaStream_t stream) {
  if (!cudnn_selected() || (t != DType::bf16 && t != DType::f16) || a.doc_start != nullptr) return false;
  if (!shape_fits(a.d, a.q, a.k, a.v) || !aligned16(a.out)) return false;
#if ZT_HAVE_CUDNN
  const Key k = key_of(a.d, t, false);
  cudnnHandle_t h = nullptr;
  const Entry* e = prepare(k, a.d, &h);
  if (e == nullptr) return false;
  const ArenaScope scope(ws);
  Pack pack = {{kQ, const_cast<void*>(a.q)}, {kK, const_cast<void*>(a.k)}, {kV, const_cast<void*>(a.v)},
               {kO, a.out},                  {kStats, a.lse}};
  run(k, *e, h, pack, ws, stream);
  return true;
#else
  (void)ws;
  (void)stream;
  return false;
#endif
}

bool cudnn_bwd(const BwdArgs& a, DType t, const void* out, const void* dout, DType dout_dtype, Arena& ws,
               cudaStream_t stream) {
  if (!cudnn_selected() || (t != DType::bf16 && t != DType::f16) || a.doc_start != nullptr) return false;
  if (!shape_fits(a.d, a.q, a.k, a.v) || !aligned16(out)) return false;
  if (dout_dtype != t && dout_dtype != DType::f32) return false;
  if (dout_dtype == t && !aligned16(dout)) return false;
  const bool sixteen = a.dq16 != nullptr;  // the caller takes the 16-bit gradients
  if (sixteen && (!aligned16(a.dq16) || !aligned16(a.dk16) || !aligned16(a.dv16) || a.ld_g16 % 8 != 0)) return false;
#if ZT_HAVE_CUDNN
  const Dims& d = a.d;
  const Key k = key_of(d, t, true, sixteen ? a.ld_g16 : 0);
  cudnnHandle_t h = nullptr;
  const Entry* e = prepare(k, d, &h);
  if (e == nullptr) return false;
  const ArenaScope scope(ws);
  const int64_t rows = static_cast<int64_t>(d.B) * d.T, Ckv = static_cast<int64_t>(d.NKV) * d.hs;
  // dO, dQ, dK, dV in the storage dtype, dense; 64-byte aligned by the arena.
  void* dout_s = dout_dtype == t ? const_cast<void*>(dout) : ws.alloc(t, Shape{rows * d.C}).data;
  void* dq = sixteen ? a.dq16 : ws.alloc(t, Shape{rows * d.C}).data;
  void* dk = sixteen ? a.dk16 : ws.alloc(t, Shape{rows * Ckv}).data;
  void* dv = sixteen ? a.dv16 : ws.alloc(t, Shape{rows * Ckv}).data;
  if (dout_dtype != t) cudnn_round(t, static_cast<const float*>(dout), dout_s, rows * d.C, stream);
  Pack pack = {{kQ, const_cast<void*>(a.q)}, {kK, const_cast<void*>(a.k)}, {kV, const_cast<void*>(a.v)},
               {kO, const_cast<void*>(out)}, {kdO, dout_s},                {kStats, const_cast<float*>(a.lse)},
               {kdQ, dq},                    {kdK, dk},                    {kdV, dv}};
  run(k, *e, h, pack, ws, stream);
  if (sixteen) return true;
  cudnn_widen(t, dq, d.C, rows, a.dq, a.ld_dq, stream);
  cudnn_widen(t, dk, Ckv, rows, a.dk, a.ld_dkv, stream);
  cudnn_widen(t, dv, Ckv, rows, a.dv, a.ld_dkv, stream);
  return true;
#else
  (void)ws;
  (void)stream;
  (void)dout;
  return false;
#endif
}

}  // namespace attn

bool attention_cudnn_compiled() { return ZT_HAVE_CUDNN != 0; }

bool attention_cudnn_selected() { return cudnn_selected(); }

uint64_t attention_cudnn_calls() { return g_cudnn_calls.load(std::memory_order_relaxed); }

}  // namespace zt
