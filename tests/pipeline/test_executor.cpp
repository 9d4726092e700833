// The executor on fake stages: hand-made instruction lists walked over units
// whose arithmetic is known in closed form, so the loss and every gradient
// are checked exactly, and the trace of what ran is checked against the list.
// A wrong list is refused before anything runs. Registered with np 1 and 2:
// the two-stage tests run on 2 ranks and skip elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm/topology.hpp"
#include "modules/cpu_kernels.hpp"
#include "pipeline/executor.hpp"
#include "pipeline/simulate.hpp"

namespace zt {
namespace {

constexpr int64_t kB = 2, kT = 3, kC = 2;
constexpr int kUnits = 6;  // source, four adds, loss

// Micro-batches whose losses the last unit added in its backward
// ([Note: loss in the backward]: training walks) and in its forward.
int& late_sums() {
  static int n = 0;
  return n;
}
int& early_sums() {
  static int n = 0;
  return n;
}

std::vector<std::string>& trace() {
  static std::vector<std::string> t;
  return t;
}
float* f32(const Tensor& t) { return static_cast<float*>(t.data); }

// Unit 0: out[n, c] = token[n] + p[c]. Units 1..4: out = in + p. Unit 5:
// loss[n] = sum_c in[n, c] * q[c]. Parameter k of unit u starts at
// 0.25 * (u + 1) + 0.125 * k (q of unit 5: 1 + 0.5 c).
class FakeUnit final : public Unit {
 public:
  explicit FakeUnit(int index) : index_(index) {}
  std::string name() const override { return "fake." + std::to_string(index_); }
  std::vector<ParamSpec> params() const override { return {{"p", Shape{kC}, false}}; }
  Shape input_shape(int64_t B, int64_t T) const override { return index_ == 0 ? Shape{B, T} : Shape{B, T, kC}; }
  DType input_dtype(DType act) const override { return index_ == 0 ? DType::i32 : act; }
  Shape output_shape(int64_t B, int64_t T) const override { return last() ? Shape{B, T} : Shape{B, T, kC}; }
  DType output_dtype(DType act) const override { return last() ? math_dtype(act) : act; }
  void init_param(int, int64_t, int64_t, float*, uint64_t, int) const override {}

  void forward(const UnitContext& ctx, const std::vector<Tensor>& p, const Tensor& in, const Tensor& out,
               Stash& stash) const override {
    trace().push_back("F" + std::to_string(index_));
    const int64_t N = ctx.B * ctx.T;
    const float* w = f32(p[0]);
    for (int64_t n = 0; n < N; ++n) {
      if (index_ == 0) {
        for (int c = 0; c < kC; ++c) f32(out)[n * kC + c] = static_cast<float>(static_cast<int32_t*>(in.data)[n]) + w[c];
      } else if (last()) {
        float l = 0;
        for (int c = 0; c < kC; ++c) l += f32(in)[n * kC + c] * w[c];
        f32(out)[n] = l;
      } else {
        for (int c = 0; c < kC; ++c) f32(out)[n * kC + c] = f32(in)[n * kC + c] + w[c];
      }
    }
    if (last() && ctx.loss_sum.defined()) {
      if (ctx.loss_in_backward) {
        stash.t = {out};
      } else {
        ctx.kernels->sum_into(out, ctx.loss_sum);
        ++early_sums();
      }
    }
  }
  void backward(const UnitContext& ctx, const std::vector<Tensor>& p, const std::vector<Tensor>& g, const Tensor& in,
                const Tensor& dout, const Tensor& din, Stash& stash) const override {
    trace().push_back("B" + std::to_string(index_));
    if (!stash.t.empty()) {
      ctx.kernels->sum_into(stash.t[0], ctx.loss_sum);
      ++late_sums();
    }
    const int64_t N = ctx.B * ctx.T;
    for (int64_t n = 0; n < N; ++n)
      for (int c = 0; c < kC; ++c) {
        if (last()) {
          f32(g[0])[c] += f32(dout)[n] * f32(in)[n * kC + c];
          f32(din)[n * kC + c] = f32(dout)[n] * f32(p[0])[c];
        } else {
          f32(g[0])[c] += f32(dout)[n * kC + c];
          if (index_ > 0) f32(din)[n * kC + c] = f32(dout)[n * kC + c];
        }
      }
  }

 private:
  bool last() const { return index_ == kUnits - 1; }
  int index_;
};

float initial(int unit, int c) { return unit == kUnits - 1 ? 1.0f + 0.5f * c : 0.25f * (unit + 1) + 0.125f * c; }
int32_t token(int mb, int64_t n) { return static_cast<int32_t>(mb * 10 + n); }

// Parameters, gradients and the step hooks of a fake stage; everything is
// recorded in the trace.
class FakeStage final : public ParamProvider, public GradSink, public StepHooks {
 public:
  FakeStage() : p_(kUnits, std::vector<float>(kC)), g_(kUnits, std::vector<float>(kC, 0.0f)) {
    for (int u = 0; u < kUnits; ++u)
      for (int c = 0; c < kC; ++c) p_[u][c] = initial(u, c);
  }
  std::vector<Tensor> acquire(int unit, Phase) override { return {Tensor(p_[unit].data(), DType::f32, Shape{kC})}; }
  void release(int, Phase) override {}
  std::vector<Tensor> grads(int unit) override { return {Tensor(g_[unit].data(), DType::f32, Shape{kC})}; }
  void done(int unit) override { trace().push_back("done" + std::to_string(unit)); }
  void load_batch(int mb, const Tensor& tokens, const Tensor& targets, const Tensor&) override {
    trace().push_back("load" + std::to_string(mb));
    for (int64_t n = 0; n < kB * kT; ++n) {
      static_cast<int32_t*>(tokens.data)[n] = token(mb, n);
      static_cast<int32_t*>(targets.data)[n] = 0;
    }
  }
  void reduce_grads() override { trace().push_back("reduce"); }
  void optimizer_step() override { trace().push_back("optimizer"); }
  float grad(int unit, int c) const { return g_[unit][c]; }

 private:
  std::vector<std::vector<float>> p_, g_;
};

// The loss sum over M micro-batches and the gradients with loss weight w.
struct Expected {
  double loss = 0;
  float grad[kUnits][kC] = {};
};
Expected expected(int M, float w) {
  Expected e;
  for (int mb = 0; mb < M; ++mb)
    for (int64_t n = 0; n < kB * kT; ++n)
      for (int c = 0; c < kC; ++c) {
        float x = static_cast<float>(token(mb, n));
        for (int u = 0; u < kUnits - 1; ++u) x += initial(u, c);
        e.loss += x * initial(kUnits - 1, c);
        e.grad[kUnits - 1][c] += w * x;
        for (int u = 0; u < kUnits - 1; ++u) e.grad[u][c] += w * initial(kUnits - 1, c);
      }
  return e;
}

// One stage's executor over the fake model.
struct Harness {
  Harness(std::vector<UnitRange> chunks, int P, int V, int stage, Communicator& pp)
      : runner(views(), kernels, dev, DType::f32, DType::f32, false),
        exec(std::move(chunks), P, V, stage, runner, dev, pp, kB, kT, ArenaChunks{4096, 4096}),
        dloss(dev, DType::f32, Shape{kB, kT}, MemTag::activations),
        loss(dev, DType::f64, Shape{1}, MemTag::workspace) {
    for (int64_t n = 0; n < kB * kT; ++n) dloss.as<float>()[n] = kWeight;
    *loss.as<double>() = 0;
  }
  std::vector<const Unit*> views() {
    for (int u = 0; u < kUnits; ++u) owned.push_back(std::make_unique<FakeUnit>(u));
    std::vector<const Unit*> v;
    for (const auto& u : owned) v.push_back(u.get());
    return v;
  }
  void run(const std::vector<PipeInstr>& list, bool train = true) {
    WalkArgs a;
    a.params = &stage;
    a.grads = &stage;
    a.hooks = &stage;
    a.dloss = dloss.tensor();
    a.loss_sum = loss.tensor();
    a.train = train;
    exec.run(list, a);
  }
  double loss_sum() const { return *loss.as<double>(); }
  static constexpr float kWeight = 0.5f;
  CpuDevice dev;
  CpuKernels kernels;
  std::vector<std::unique_ptr<Unit>> owned;
  FakeStage stage;
  UnitRunner runner;
  PipelineExecutor exec;
  Buffer dloss, loss;
};

PipeInstr F(int mb, int c = 0) { return {PipeOp::forward, mb, c}; }
PipeInstr B(int mb, int c = 0) { return {PipeOp::backward, mb, c}; }
PipeInstr SA(int mb, int c = 0) { return {PipeOp::send_act, mb, c}; }
PipeInstr RA(int mb, int c = 0) { return {PipeOp::recv_act, mb, c}; }
PipeInstr SG(int mb, int c = 0) { return {PipeOp::send_grad, mb, c}; }
PipeInstr RG(int mb, int c = 0) { return {PipeOp::recv_grad, mb, c}; }
const PipeInstr kReduce{PipeOp::reduce_grads}, kOptimizer{PipeOp::optimizer_step};

void expect_grads(const FakeStage& s, const Expected& e, const std::vector<int>& units) {
  for (int u : units)
    for (int c = 0; c < kC; ++c) EXPECT_FLOAT_EQ(s.grad(u, c), e.grad[u][c]) << "unit " << u << " c " << c;
}

std::vector<std::string> forward_units(int mb) {
  std::vector<std::string> t{"load" + std::to_string(mb)};
  for (int u = 0; u < kUnits; ++u) t.push_back("F" + std::to_string(u));
  return t;
}
std::vector<std::string> backward_units() {
  std::vector<std::string> t;
  for (int u = kUnits - 1; u >= 0; --u) {
    t.push_back("B" + std::to_string(u));
    t.push_back("done" + std::to_string(u));
  }
  return t;
}
template <typename... L>
std::vector<std::string> cat(const L&... lists) {
  std::vector<std::string> out;
  (out.insert(out.end(), lists.begin(), lists.end()), ...);
  return out;
}

class Executor : public ::testing::Test {
 protected:
  void SetUp() override { trace().clear(); }
  bool world_of(int n) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size == n;
  }
};

TEST_F(Executor, OneStageWalksTheListInOrder) {
  if (!world_of(1)) GTEST_SKIP() << "one process";
  Topology topo(1);
  Harness h({{0, kUnits}}, 1, 1, 0, topo.pp());
  late_sums() = early_sums() = 0;
  h.run({F(0), B(0), F(1), B(1), kReduce, kOptimizer});
  EXPECT_EQ(trace(), cat(forward_units(0), backward_units(), forward_units(1), backward_units(),
                         std::vector<std::string>{"reduce", "optimizer"}));
  const Expected e = expected(2, Harness::kWeight);
  EXPECT_DOUBLE_EQ(h.loss_sum(), e.loss);
  EXPECT_EQ(late_sums(), 2) << "a training walk adds the losses in the head's backward";
  EXPECT_EQ(early_sums(), 0);
  expect_grads(h.stage, e, {0, 1, 2, 3, 4, 5});
}

TEST_F(Executor, GpipeOrderGivesTheSameGradients) {
  if (!world_of(1)) GTEST_SKIP() << "one process";
  Topology topo(1);
  Harness h({{0, kUnits}}, 1, 1, 0, topo.pp());
  h.run({F(0), F(1), F(2), B(2), B(1), B(0), kReduce, kOptimizer});
  EXPECT_EQ(trace(), cat(forward_units(0), forward_units(1), forward_units(2), backward_units(), backward_units(),
                         backward_units(), std::vector<std::string>{"reduce", "optimizer"}));
  const Expected e = expected(3, Harness::kWeight);
  EXPECT_DOUBLE_EQ(h.loss_sum(), e.loss);
  expect_grads(h.stage, e, {0, 1, 2, 3, 4, 5});
}

TEST_F(Executor, EvaluationRunsForwardsOnly) {
  if (!world_of(1)) GTEST_SKIP() << "one process";
  Topology topo(1);
  Harness h({{0, kUnits}}, 1, 1, 0, topo.pp());
  late_sums() = early_sums() = 0;
  h.run({F(0), B(0), F(1), B(1), kReduce, kOptimizer}, false);
  EXPECT_EQ(trace(), cat(forward_units(0), forward_units(1)));
  EXPECT_DOUBLE_EQ(h.loss_sum(), expected(2, 0).loss);
  EXPECT_EQ(late_sums(), 0);
  EXPECT_EQ(early_sums(), 2) << "an evaluation walk adds the losses in the forward";
  expect_grads(h.stage, Expected{}, {0, 5});
}

// Each wrong list is refused with a message naming the broken rule, and
// nothing of it runs.
TEST_F(Executor, RefusesWrongListsBeforeRunningThem) {
  if (!world_of(1)) GTEST_SKIP() << "one process";
  Topology topo(1);
  Harness h({{0, kUnits}}, 1, 1, 0, topo.pp());
  const struct {
    std::vector<PipeInstr> list;
    std::string says;
  } wrong[] = {
      {{B(0), F(0), kReduce, kOptimizer}, "Backward(mb=0,c=0): comes before its Forward"},
      {{F(0), B(0), F(0), B(0), kReduce, kOptimizer}, "Forward(mb=0,c=0): appears twice"},
      {{F(0), F(1), B(1), kReduce, kOptimizer}, "Backward(mb=0,c=0) is missing"},
      {{F(1), B(1), kReduce, kOptimizer}, "Forward(mb=0,c=0) is missing"},
      {{F(0), B(0), kOptimizer, kReduce}, "OptimizerStep: comes before ReduceGrads"},
      {{F(0), kReduce, B(0), kOptimizer}, "comes after ReduceGrads"},
      {{F(0), B(0), kReduce}, "OptimizerStep is missing"},
      {{F(0), SA(0), B(0), kReduce, kOptimizer}, "SendAct(mb=0,c=0): global chunk 0 has no neighbour"},
      {{F(0, 1), B(0, 1), kReduce, kOptimizer}, "chunk outside 0..0"},
      {{F(-1), B(-1), kReduce, kOptimizer}, "negative micro-batch"},
  };
  for (const auto& w : wrong) {
    trace().clear();
    try {
      h.run(w.list);
      ADD_FAILURE() << "accepted a wrong list, expected: " << w.says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(w.says), std::string::npos) << e.what();
    }
    EXPECT_TRUE(trace().empty()) << "ran " << trace().size() << " steps of a refused list";
  }
}

// The rules of a stage's messages, on a two-stage layout (no communication:
// validate_program alone).
TEST_F(Executor, ValidatesMessagesOfEachStage) {
  if (!world_of(1)) GTEST_SKIP() << "one process";
  EXPECT_NO_THROW(validate_program({F(0), SA(0), RG(0), B(0), kReduce, kOptimizer}, 2, 1, 0, true));
  EXPECT_NO_THROW(validate_program({RA(0), F(0), B(0), SG(0), kReduce, kOptimizer}, 2, 1, 1, true));
  EXPECT_THROW(validate_program({F(0), B(0), SG(0), kReduce, kOptimizer}, 2, 1, 1, true), Error);   // no RecvAct
  EXPECT_THROW(validate_program({F(0), RA(0), B(0), SG(0), kReduce, kOptimizer}, 2, 1, 1, true), Error);  // late
  EXPECT_THROW(validate_program({F(0), SA(0), B(0), kReduce, kOptimizer}, 2, 1, 0, true), Error);  // no RecvGrad
  EXPECT_THROW(validate_program({RA(0), F(0), B(0), kReduce, kOptimizer}, 2, 1, 1, true), Error);  // no SendGrad
  // Evaluation: the gradient side is skipped, not checked.
  EXPECT_NO_THROW(validate_program({F(0), SA(0)}, 2, 1, 0, false));
  EXPECT_THROW(validate_program({F(0)}, 2, 1, 0, false), Error);  // SendAct missing
  // Interleaved: a micro-batch goes back through its chunks in reverse.
  const std::vector<PipeInstr> reverse = {F(0, 0), SA(0, 0), RA(0, 1), F(0, 1), B(0, 1),
                                          SG(0, 1), RG(0, 0), B(0, 0), kReduce, kOptimizer};
  EXPECT_NO_THROW(validate_program(reverse, 1, 2, 0, true));
  const std::vector<PipeInstr> forward_order = {F(0, 0), SA(0, 0), RA(0, 1), F(0, 1), RG(0, 0), B(0, 0),
                                                B(0, 1), SG(0, 1), kReduce, kOptimizer};
  EXPECT_THROW(validate_program(forward_order, 1, 2, 0, true), Error);
}

// Every list the schedules make passes the executor's check.
TEST_F(Executor, EveryGeneratedScheduleIsValid) {
  if (!world_of(1)) GTEST_SKIP() << "one process";
  for (int P = 1; P <= 6; ++P)
    for (int M = P; M <= 3 * P; ++M)
      for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
        for (int V = k == ScheduleKind::interleaved ? 2 : 1; V <= (k == ScheduleKind::interleaved ? 3 : 1); ++V) {
          if (k == ScheduleKind::interleaved && M % P != 0) continue;
          for (int s = 0; s < P; ++s) {
            SCOPED_TRACE(detail::concat(schedule_kind_name(k), " P=", P, " V=", V, " M=", M, " stage ", s));
            EXPECT_NO_THROW(validate_program(make_schedule(k, P, V, M, s), P, V, s, true));
            EXPECT_NO_THROW(validate_program(make_forward_schedule(P, V, M, s), P, V, s, false));
          }
        }
}

// Two stages on two ranks, hand-made 1F1B lists: the loss (on the last
// stage) and every gradient equal the closed form, as on one stage.
TEST_F(Executor, TwoStagesMatchTheClosedForm) {
  if (!world_of(2)) GTEST_SKIP() << "two processes";
  Topology topo(2);
  const int s = topo.pp_rank();
  Harness h({{0, 3}, {3, kUnits}}, 2, 1, s, topo.pp());
  const std::vector<PipeInstr> stage0 = {F(0), SA(0), F(1), SA(1), RG(0), B(0), F(2), SA(2), RG(1), B(1),
                                         RG(2), B(2), kReduce, kOptimizer};
  const std::vector<PipeInstr> stage1 = {RA(0), F(0), B(0), SG(0), RA(1), F(1), B(1), SG(1),
                                         RA(2), F(2), B(2), SG(2), kReduce, kOptimizer};
  h.run(s == 0 ? stage0 : stage1);
  const Expected e = expected(3, Harness::kWeight);
  EXPECT_DOUBLE_EQ(h.loss_sum(), s == 1 ? e.loss : 0.0);
  expect_grads(h.stage, e, s == 0 ? std::vector<int>{0, 1, 2} : std::vector<int>{3, 4, 5});
  EXPECT_EQ(trace().back(), "optimizer");
}

// Two stages of two chunks each (interleaved), the lists of make_schedule.
TEST_F(Executor, InterleavedStagesMatchTheClosedForm) {
  if (!world_of(2)) GTEST_SKIP() << "two processes";
  Topology topo(2);
  const int s = topo.pp_rank();
  Harness h({{0, 2}, {2, 3}, {3, 4}, {4, kUnits}}, 2, 2, s, topo.pp());
  h.run(make_schedule(ScheduleKind::interleaved, 2, 2, 4, s));
  const Expected e = expected(4, Harness::kWeight);
  EXPECT_DOUBLE_EQ(h.loss_sum(), s == 1 ? e.loss : 0.0);
  expect_grads(h.stage, e, s == 0 ? std::vector<int>{0, 1, 3} : std::vector<int>{2, 4, 5});
  trace().clear();
  h.run(make_forward_schedule(2, 2, 4, s), false);
  EXPECT_EQ(std::count(trace().begin(), trace().end(), "B0"), 0);
}

// The message buffers (received gradients, sent input gradients) come from
// a pool: a walk after the first allocates none, and the input gradient is
// written straight into the buffer it is sent from (no copy).
TEST_F(Executor, ASecondWalkAllocatesNoMessageBuffers) {
  if (!world_of(2)) GTEST_SKIP() << "two processes";
  Topology topo(2);
  const int s = topo.pp_rank();
  Harness h({{0, 2}, {2, 3}, {3, 4}, {4, kUnits}}, 2, 2, s, topo.pp());
  const std::vector<PipeInstr> list = make_schedule(ScheduleKind::interleaved, 2, 2, 4, s);
  h.run(list);
  const uint64_t after_first = h.dev.stats().allocations[static_cast<int>(MemTag::comm)];
  EXPECT_GT(after_first, 0u);  // the first walk takes what it needs
  h.run(list);
  h.run(list);
  EXPECT_EQ(h.dev.stats().allocations[static_cast<int>(MemTag::comm)], after_first);
  const Expected e = expected(4, Harness::kWeight);
  EXPECT_DOUBLE_EQ(h.loss_sum(), s == 1 ? 3 * e.loss : 0.0);
}

}  // namespace
}  // namespace zt
