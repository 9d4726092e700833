// The step report and run control on one rank: the communication volume in
// units of the parameter count, the records metrics.jsonl gets (with and
// without fp16 and wall_clock_breakdown), the end event, what happens after
// each step, and the run options derived from a config.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "train/run_control.hpp"
#include "train/run_options.hpp"
#include "train/step_report.hpp"
#include "train_test_util.hpp"

namespace zt {
namespace {

std::vector<nlohmann::json> records(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(StepReport, CommunicationVolumeInParameterCounts) {
  CommCounters c;
  const int64_t psi = 1000;
  c.bytes[static_cast<int>(CommOp::all_reduce)] = 4 * psi;  // fp32 gradients all-reduced: 2 psi
  EXPECT_DOUBLE_EQ(comm_volume_psi(c, DType::bf16, psi), 2.0);
  c = CommCounters{};
  c.bytes[static_cast<int>(CommOp::reduce_scatter)] = 4 * psi;  // ZeRO-3: reduce-scatter fp32 ...
  c.bytes[static_cast<int>(CommOp::all_gather)] = 2 * 2 * psi;  // ... and two bf16 gathers
  EXPECT_DOUBLE_EQ(comm_volume_psi(c, DType::bf16, psi), 3.0);
}

// [Note: phase clock]: every run that reports phase times (the breakdown's
// line and records, or prometheus's ztrain_phase_seconds) times them with
// the device's clock; others put no mark in the step.
TEST(StepReport, PhaseTimesAreReportedWithTheBreakdownOrPrometheus) {
  const std::string dir = test::log_dir();
  EXPECT_FALSE(reports_phase_times(test::small_config(dir)));
  EXPECT_TRUE(reports_phase_times(test::small_config(dir, {"wall_clock_breakdown=true"})));
  EXPECT_TRUE(reports_phase_times(test::small_config(dir, {"prometheus.enabled=true"})));
}

TEST(StepReport, RecordsCarryTheStepAndTheBreakdown) {
  if (test::world_size() != 1) GTEST_SKIP() << "one process";
  const std::string dir = test::log_dir() + "-report";
  std::filesystem::remove_all(dir);
  const Config cfg = test::small_config(dir, {"wall_clock_breakdown=true", "fp16.enabled=true"});
  test::CpuRank r;
  const RunOptions opts = run_options(cfg, 1, 1);
  {
    StepReporter rep(cfg, opts, r.comms, 1000);
    StepStats st;
    st.step = 3;
    st.loss = 2.5;
    st.grad_norm = 0.75;
    st.lr = 1e-3;
    st.step_seconds = 0.5;
    st.tokens = 64;  // counted targets: 8 sequences of 8 tokens, no loss mask
    st.loss_scale = 1024;
    st.skipped = true;
    st.timing.reduce_s = 0.125;
    st.comm.bytes[static_cast<int>(CommOp::all_reduce)] = 8000;
    rep.add(st);
    rep.report(st, 2.25, 1.5, 3);
    st.tokens = 16;  // a loss mask counted 16 of the 64 targets
    rep.add(st);
    rep.report(st, std::nan(""), 2.0, 4);
    rep.report_end(r.dev, 4, 2.0);
  }
  const std::vector<nlohmann::json> recs = records(dir);
  ASSERT_EQ(recs.size(), 3u);
  const nlohmann::json& a = recs[0];
  EXPECT_EQ(a.at("step"), 3);
  EXPECT_EQ(a.at("loss"), 2.5);
  EXPECT_EQ(a.at("grad_norm"), 0.75);
  EXPECT_EQ(a.at("val_loss"), 2.25);
  EXPECT_EQ(a.at("loss_scale"), 1024.0);
  EXPECT_EQ(a.at("skipped"), true);
  // tokens/s over the window: 8 sequences of 8 tokens in 0.5 s.
  EXPECT_DOUBLE_EQ(a.at("tokens_per_s").get<double>(), 128.0);
  EXPECT_EQ(a.at("comm_bytes").at("all_reduce"), 8000);
  EXPECT_DOUBLE_EQ(a.at("comm_volume_psi").get<double>(), 4.0);
  EXPECT_EQ(a.at("time_breakdown_s").at("reduce"), 0.125);
  EXPECT_FALSE(recs[1].contains("val_loss"));
  EXPECT_DOUBLE_EQ(recs[1].at("tokens_per_s").get<double>(), 32.0);  // only counted targets
  EXPECT_EQ(recs[2].at("event"), "end");
  EXPECT_TRUE(recs[2].at("peak_bytes").contains("total"));
  std::filesystem::remove_all(dir);
}

// Prometheus at the run's end exports the last printed step as it was read
// (on a GPU the device's phase times, read after add() saw the host's), not
// as add() saw it.
TEST(StepReport, PrometheusKeepsTheLastPrintedStepAsReadAtTheEnd) {
  if (test::world_size() != 1) GTEST_SKIP() << "one process";
  const std::string dir = test::log_dir() + "-prom";
  std::filesystem::remove_all(dir);
  const Config cfg = test::small_config(dir, {"prometheus.enabled=true", "prometheus.port=0",
                                              "prometheus.textfile_dir=\"" + dir + "/prom\""});
  test::CpuRank r;
  const RunOptions opts = run_options(cfg, 1, 1);
  try {
    StepReporter rep(cfg, opts, r.comms, 1000, &r.dev);
    StepStats st;
    st.step = 1;
    st.step_seconds = 0.5;
    st.tokens = 64;
    st.timing.walk.forward_s = 0.001;  // as added: the host's time
    rep.add(st);
    st.loss = 2.5;
    st.timing.walk.forward_s = 0.25;  // as read
    rep.report(st, std::nan(""), 1.0, 1);
    rep.report_end(r.dev, 1, 1.0);
  } catch (const UserError& e) {
    GTEST_SKIP() << "no Prometheus export in this build: " << e.what();
  }
  std::ifstream in(dir + "/prom/ztrain.prom");
  double forward = -1;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("ztrain_phase_seconds{", 0) == 0 && line.find("phase=\"forward\"") != std::string::npos)
      forward = std::stod(line.substr(line.rfind(' ') + 1));
  EXPECT_EQ(forward, 0.25);
  std::filesystem::remove_all(dir);
}

TEST(RunControl, WhatHappensAfterEachStep) {
  const Config cfg = test::small_config(test::log_dir(), {"steps_per_print=5", "train.steps=20",
                                                          "train.eval_interval=10", "checkpoint.interval=4",
                                                          "checkpoint.dir=\"" + test::log_dir() + "/ck\""});
  // step, stopped, skipped -> last, save, validate, print (with checkpoints and a val split)
  const struct {
    int64_t step;
    bool stopped, skipped;
    AfterStep want;
  } rows[] = {
      {1, false, false, {false, false, false, true}},   // the first step is printed
      {2, false, false, {false, false, false, false}},
      {4, false, false, {false, true, false, false}},   // checkpoint interval
      {5, false, false, {false, false, false, true}},   // steps_per_print
      {7, false, true, {false, false, false, true}},    // an fp16 skip is printed
      {10, false, false, {false, false, true, true}},   // validation is reported
      {11, true, false, {true, true, true, true}},      // a stop saves, validates, prints and ends
      {20, false, false, {true, true, true, true}},     // the last step
  };
  for (const auto& r : rows) {
    const AfterStep a = after_step(cfg, r.step, r.stopped, r.skipped, true, true);
    EXPECT_EQ(a.last, r.want.last) << "step " << r.step;
    EXPECT_EQ(a.save, r.want.save) << "step " << r.step;
    EXPECT_EQ(a.validate, r.want.validate) << "step " << r.step;
    EXPECT_EQ(a.print, r.want.print) << "step " << r.step;
  }
  // Without checkpoint.dir nothing is saved, without a val split nothing validated.
  const AfterStep none = after_step(cfg, 20, false, false, false, false);
  EXPECT_TRUE(none.last && none.print);
  EXPECT_FALSE(none.save || none.validate);
  // The last step saves even off the interval (checkpoint.save_at_end), and
  // says that this save is the end's alone; save_at_end false: no save.
  EXPECT_FALSE(after_step(cfg, 20, false, false, true, true).save_at_end_only) << "20 is on the interval";
  Config odd = test::small_config(test::log_dir(), {"train.steps=19", "checkpoint.interval=4",
                                                     "checkpoint.dir=\"" + test::log_dir() + "/ck\""});
  const AfterStep end = after_step(odd, 19, false, false, true, true);
  EXPECT_TRUE(end.last && end.save && end.save_at_end_only);
  odd.checkpoint.save_at_end = false;
  EXPECT_FALSE(after_step(odd, 19, false, false, true, true).save);
  EXPECT_TRUE(after_step(odd, 19, true, false, true, true).save) << "a stop saves";
}

TEST(RunOptions, DerivedOnceFromTheConfig) {
  const Config bf = test::small_config(test::log_dir(), {"bf16.enabled=true", "zero_optimization.stage=3"});
  const RunOptions o = run_options(bf, test::world_size(), 1);
  EXPECT_EQ(o.param_dtype, DType::bf16);
  EXPECT_EQ(o.act_dtype, DType::bf16);
  EXPECT_EQ(o.zero.stage, 3);
  EXPECT_EQ(o.zero.param_dtype, DType::bf16);
  EXPECT_EQ(o.global_batch, 8);
  EXPECT_EQ(o.B * o.accum * test::world_size(), 8);
  EXPECT_EQ(o.tokens_per_step(), 64);
  EXPECT_FALSE(o.loss_scaler.has_value());
  EXPECT_EQ(o.P, 1);
  EXPECT_EQ(o.adamw.weight_decay, 0.1);
  const RunOptions h = run_options(test::small_config(test::log_dir(), {"fp16.enabled=true"}), test::world_size(), 1);
  ASSERT_TRUE(h.loss_scaler.has_value());
  EXPECT_EQ(h.loss_scaler->initial_scale_power, 16);
}

}  // namespace
}  // namespace zt
