// One test per class of bad config: each asserts zt::UserError and that the
// message names the file, the JSON path, what was expected and what was found.
#include <unistd.h>

#include <filesystem>

#include "config_test_util.hpp"

namespace zt::test {
namespace {

TEST(ConfigErrors, UnknownTopLevelKeySuggestsNearest) {
  const std::string msg = parse_error(R"({"train_batch_sise": 8})");
  EXPECT_EQ(msg, "config.json: train_batch_sise: unknown key; did you mean 'train_batch_size'?");
}

TEST(ConfigErrors, UnknownNestedKeySuggestsNearest) {
  const std::string msg = parse_error(R"({"zero_optimization": {"stgae": 0}})");
  EXPECT_EQ(msg, "config.json: zero_optimization.stgae: unknown key; did you mean 'stage'?");
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"offload_optimizer": {"devce": "cpu"}}})"),
                  "config.json: zero_optimization.offload_optimizer.devce: unknown key; did you mean 'device'?");
  EXPECT_CONTAINS(parse_error(R"({"optimizer": {"params": {"Lr": 0.1}}})"),
                  "optimizer.params.Lr: unknown key; did you mean 'lr'?");
}

TEST(ConfigErrors, KeyAtWrongLevelNamesItsSection) {
  EXPECT_EQ(parse_error(R"({"stage": 0})"),
            "config.json: stage: unknown key at the top level; did you mean 'zero_optimization.stage'?");
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"gradient_clipping": 1.0}})"),
                  "zero_optimization.gradient_clipping: unknown key in 'zero_optimization'; did you mean "
                  "'gradient_clipping'?");
}

// [Note: features that change what is trained]: turned on, an error that
// names the section and how to go on; off (or absent), nothing.
TEST(ConfigErrors, DeepSpeedFeaturesThatChangeWhatIsTrainedAreRefusedWhenOn) {
  EXPECT_EQ(parse_error(R"({"sparse_attention": {"mode": "fixed", "block": 16}})"),
            "config.json: sparse_attention: a DeepSpeed feature that changes what is trained, which ztrain does not "
            "implement (ztrain's attention is dense and causal); remove the section or set \"enabled\": false to "
            "train without it");
  EXPECT_CONTAINS(parse_error(R"({"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen"}})"),
                  "config.json: curriculum_learning: a DeepSpeed feature that changes what is trained");
  EXPECT_CONTAINS(parse_error(R"({"compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true}}}})"),
                  "config.json: compression_training: a DeepSpeed feature that changes what is trained");
  EXPECT_CONTAINS(parse_error(R"({"tensor_parallel": {"autotp_size": 2}})"),
                  "tensor_parallel: a DeepSpeed feature that changes what is trained, which ztrain does not implement "
                  "(ztrain splits a model by ZeRO and pipeline.parallel_size)");
  EXPECT_CONTAINS(parse_error(R"({"amp": {"enabled": true, "opt_level": "O1"}})"),
                  "amp: a DeepSpeed feature that changes what is trained, which ztrain does not implement (ztrain's "
                  "mixed precision is bf16.enabled or fp16.enabled)");
  EXPECT_CONTAINS(parse_error(R"({"progressive_layer_drop": {"enabled": true, "theta": 0.5}})"),
                  "progressive_layer_drop: a DeepSpeed feature that changes what is trained");
}

TEST(ConfigErrors, DeepSpeedFeaturesThatChangeWhatIsTrainedMayStayOff) {
  for (const char* text :
       {R"({"curriculum_learning": {"enabled": false, "curriculum_type": "seqlen"}})",
        R"({"compression_training": {"weight_quantization": {"shared_parameters": {"enabled": false}}}})",
        R"({"tensor_parallel": {"autotp_size": 1}})", R"({"amp": {"enabled": false}})",
        R"({"sparse_attention": null})", R"({"elasticity": {"enabled": false, "max_train_batch_size": 64}})"}) {
    const Config cfg = parse(text);
    EXPECT_TRUE(cfg.warnings.empty()) << text << ": " << (cfg.warnings.empty() ? "" : cfg.warnings[0]);
  }
  // Monitoring stays a warning.
  const Config cfg = parse(R"({"flops_profiler": {"enabled": true}})");
  ASSERT_EQ(cfg.warnings.size(), 1u);
  EXPECT_CONTAINS(cfg.warnings[0], "flops_profiler: DeepSpeed option that ztrain does not implement; ignored");
}

TEST(ConfigErrors, UnknownKeyWithoutNearMatchListsKnownKeys) {
  EXPECT_EQ(parse_error(R"({"log": {"verbosity_level": 3}})"),
            "config.json: log.verbosity_level: unknown key; known keys here: dir");
}

TEST(ConfigErrors, SchedulerParameterOfAnotherType) {
  const std::string msg = parse_error(
      R"({"scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 100}}})");
  EXPECT_CONTAINS(msg, "config.json: scheduler.params.total_num_steps: not a parameter of WarmupLR");
  EXPECT_CONTAINS(msg, "WarmupDecayLR");
}

TEST(ConfigErrors, WrongTypeNamesExpectedAndFound) {
  EXPECT_EQ(parse_error(R"({"train": {"steps": "ten"}})"),
            "config.json: train.steps: expected a positive integer, found \"ten\"");
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"reduce_bucket_size": 0}})"),
                  "config.json: zero_optimization.reduce_bucket_size: expected a positive integer");
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"allgather_bucket_size": -5}})"),
                  "config.json: zero_optimization.allgather_bucket_size: expected a positive integer");
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage3_param_persistence_threshold": "abc"}})"),
                  "config.json: zero_optimization.stage3_param_persistence_threshold: expected a non-negative integer, found \"abc\"");
  EXPECT_EQ(parse_error(R"({"zero_optimization": {"reduce_bucket_size": "big"}})"),
            "config.json: zero_optimization.reduce_bucket_size: expected a positive integer, found \"big\"");
  EXPECT_EQ(parse_error(R"({"train": {"steps": 2.5}})"),
            "config.json: train.steps: expected a positive integer, found 2.5");
  EXPECT_EQ(parse_error(R"({"wall_clock_breakdown": 1})"),
            "config.json: wall_clock_breakdown: expected true or false, found 1");
  EXPECT_EQ(parse_error(R"({"fp16": 3})"), "config.json: fp16: expected an object, found 3");
  EXPECT_EQ(parse_error(R"({"data": {"train": 7}})"), "config.json: data.train: expected a string, found 7");
  EXPECT_EQ(parse_error(R"({"optimizer": {"params": {"lr": [1]}}})"),
            "config.json: optimizer.params.lr: expected a number > 0, found [1]");
  EXPECT_CONTAINS(parse_error(R"({"optimizer": {"params": {"betas": 0.9}}})"),
                  "optimizer.params.betas: expected an array of two numbers in [0, 1), found 0.9");
  EXPECT_EQ(parse_error(R"([1, 2])"), "config.json: expected a JSON object at the top level, found [1,2]");
}

TEST(ConfigErrors, AutoOutsideTheBatchTripletIsExplained) {
  const std::string msg = parse_error(R"({"gradient_clipping": "auto"})");
  EXPECT_CONTAINS(msg, "config.json: gradient_clipping: expected a number >= 0, found \"auto\"");
  EXPECT_CONTAINS(msg, "HuggingFace");
}

TEST(ConfigErrors, OutOfRangeNamesBounds) {
  EXPECT_EQ(parse_error(R"({"zero_optimization": {"stage": 7}})"),
            "config.json: zero_optimization.stage: expected 0..3, found 7");
  EXPECT_EQ(parse_error(R"({"model": {"vocab_size": 16777217}})"),
            "config.json: model.vocab_size: expected 2..16777216, found 16777217");
  EXPECT_EQ(parse_error(R"({"train": {"steps": 0}})"), "config.json: train.steps: expected a positive integer, found 0");
  EXPECT_EQ(parse_error(R"({"optimizer": {"params": {"lr": 0}}})"),
            "config.json: optimizer.params.lr: expected a number > 0, found 0");
  EXPECT_EQ(parse_error(R"({"optimizer": {"params": {"betas": [0.9, 1.0]}}})"),
            "config.json: optimizer.params.betas: betas[1]: expected a number in [0, 1), found 1.0");
  EXPECT_EQ(parse_error(R"({"optimizer": {"params": {"eps": 0.0}}})"),
            "config.json: optimizer.params.eps: expected a number > 0, found 0.0");
  EXPECT_EQ(parse_error(R"({"optimizer": {"params": {"weight_decay": -0.1}}})"),
            "config.json: optimizer.params.weight_decay: expected a number >= 0, found -0.1");
  EXPECT_EQ(parse_error(R"({"gradient_clipping": -1})"),
            "config.json: gradient_clipping: expected a number >= 0, found -1");
  EXPECT_EQ(parse_error(R"({"model": {"seq_len": 0}})"), "config.json: model.seq_len: expected a positive integer, found 0");
  EXPECT_EQ(parse_error(R"({"model": {"activation_checkpointing": true, "recompute_layers": -1}})"),
            "config.json: model.recompute_layers: expected a non-negative integer, found -1");
  EXPECT_EQ(parse_error(R"({"model": {"recompute_layers": 2}})"),
            "config.json: model.recompute_layers: counts the blocks that recompute under activation checkpointing, "
            "which is off: set model.activation_checkpointing to true, or leave recompute_layers out");
  EXPECT_EQ(parse_error(R"({"model": {"n_head": 3}})"),
            "config.json: model.n_head: d_model (64) must be divisible by n_head (3)");
  EXPECT_EQ(parse_error(R"({"zero_optimization": {"offload_optimizer": {"ratio": 1.5}}})"),
            "config.json: zero_optimization.offload_optimizer.ratio: expected a number in [0, 1], found 1.5");
  EXPECT_EQ(parse_error(R"({"steps_per_print": 0})"),
            "config.json: steps_per_print: expected a positive integer, found 0");
  // A cap of 0 would refuse every allocation; no cap is the key left out.
  EXPECT_EQ(parse_error(R"({"train": {"device_memory_cap_gib": 0}})"),
            "config.json: train.device_memory_cap_gib: expected a number > 0, found 0");
  EXPECT_EQ(parse_error(R"({"train": {"classifier_chunk_mib": 0}})"),
            "config.json: train.classifier_chunk_mib: expected a number > 0, found 0");
  EXPECT_EQ(parse_error(R"({"train": {"device_memory_cap_gib": -24}})"),
            "config.json: train.device_memory_cap_gib: expected a number > 0, found -24");
  EXPECT_EQ(parse_error(R"({"train": {"device_memory_cap_gib": "24GiB"}})"),
            "config.json: train.device_memory_cap_gib: expected a number > 0, found \"24GiB\"");
}

TEST(ConfigErrors, EnumValueSuggestsNearest) {
  EXPECT_EQ(parse_error(R"({"pipeline": {"pipe_schedule_name": "interleave"}})"),
            "config.json: pipeline.pipe_schedule_name: expected one of \"1f1b\", \"interleaved\", \"gpipe\", found "
            "\"interleave\"; did you mean \"interleaved\"?");
}

TEST(ConfigErrors, UnknownModelArchitectureListsTheKnownOnes) {
  EXPECT_EQ(parse_error(R"({"model": {"arch": "mamba"}})"),
            "config.json: model.arch: expected one of \"gpt2\", \"llama\", found \"mamba\"");
  EXPECT_EQ(parse_error(R"({"model": {"arch": "gpt-2", "preset": "gpt2-124m"}})"),
            "config.json: model.arch: expected one of \"gpt2\", \"llama\", found \"gpt-2\"; did you mean \"gpt2\"?");
  EXPECT_EQ(parse_error(R"({"model": {"arch": 2}})"),
            "config.json: model.arch: expected one of \"gpt2\", \"llama\", found 2");
  EXPECT_CONTAINS(parse_error("{}", {"model.arch=bert"}),
                  "model.arch: expected one of \"gpt2\", \"llama\", found \"bert\"");
}

TEST(ConfigErrors, InconsistentBatchTripletShowsArithmetic) {
  Config cfg = parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                         "gradient_accumulation_steps": 2})");
  const std::string msg = user_error([&] { resolve_batch(cfg, 2); });
  EXPECT_CONTAINS(msg, "config.json: train_batch_size: ");
  EXPECT_CONTAINS(msg, "train_batch_size (32) != train_micro_batch_size_per_gpu (4) * gradient_accumulation_steps "
                       "(2) * data-parallel size (2) = 16");
}

TEST(ConfigErrors, IndivisibleTrainBatchShowsArithmeticAndNearestValid) {
  Config cfg = parse(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})");
  std::string msg = user_error([&] { resolve_batch(cfg, 2); });
  EXPECT_CONTAINS(msg, "train_batch_size (30) is not divisible by train_micro_batch_size_per_gpu (4) * "
                       "data-parallel size (2) = 8");
  EXPECT_CONTAINS(msg, "nearest valid train_batch_size: 24 or 32");

  Config only_train = parse(R"({"train_batch_size": 10})");
  msg = user_error([&] { resolve_batch(only_train, 4); });
  EXPECT_CONTAINS(msg, "train_batch_size (10) is not divisible by data-parallel size (4) = 4");
  EXPECT_CONTAINS(msg, "nearest valid train_batch_size: 8 or 12");

  Config small = parse(R"({"train_batch_size": 6, "gradient_accumulation_steps": 4})");
  msg = user_error([&] { resolve_batch(small, 2); });
  EXPECT_CONTAINS(msg, "gradient_accumulation_steps (4) * data-parallel size (2) = 8");
  EXPECT_CONTAINS(msg, "nearest valid train_batch_size: 8");
}

TEST(ConfigErrors, BadBatchValues) {
  EXPECT_EQ(parse_error(R"({"train_batch_size": "many"})"),
            "config.json: train_batch_size: expected a positive integer or \"auto\", found \"many\"");
  EXPECT_EQ(parse_error(R"({"gradient_accumulation_steps": 0})"),
            "config.json: gradient_accumulation_steps: expected a positive integer, found 0");
}

TEST(ConfigErrors, MissingDataFileNamesTheFile) {
  const std::string missing = "/nonexistent-dir/zt_no_such_tokens.bin";
  std::string msg = parse_error(R"({"data": {"train": ")" + missing + R"("}})");
  EXPECT_CONTAINS(msg, "config.json: data.train: file \"" + missing + "\" does not exist");

  TempFile train("train.bin");
  msg = parse_error(R"({"data": {"train": ")" + train.path() + R"(", "val": "no_such_val.bin"}})");
  EXPECT_CONTAINS(msg, "config.json: data.val: file \"no_such_val.bin\" does not exist (relative to the working "
                       "directory ");

  EXPECT_CONTAINS(parse_error(R"({"data": {"val": "x"}})"), "config.json: data.train: required when the config has");

  // Comma-separated shards: each is checked, the missing one named.
  TempFile second("second.bin");
  const std::string both = train.path() + "," + second.path();
  EXPECT_EQ(parse(R"({"data": {"train": ")" + both + R"("}})").data.train, both);
  EXPECT_CONTAINS(parse_error(R"({"data": {"train": ")" + train.path() + R"(,no_such_shard.bin"}})"),
                  "config.json: data.train: file \"no_such_shard.bin\" does not exist");
}

TEST(ConfigErrors, FeaturesNotAvailableYet) {
  for (int stage : {1, 2, 3}) {  // every ZeRO stage is available
    EXPECT_EQ(parse(R"({"zero_optimization": {"stage": )" + std::to_string(stage) + "}}").zero.stage, stage);
  }
  EXPECT_TRUE(parse(R"({"fp16": {"enabled": true}})").fp16.enabled);  // available
  EXPECT_EQ(parse(R"({"pipeline": {"parallel_size": 2}})").pipeline.parallel_size, 2);  // available
  EXPECT_CONTAINS(parse_error(R"({"checkpoint": {"interval": 100}})"),
                  "config.json: checkpoint.interval: checkpoints every 100 steps need checkpoint.dir");
  EXPECT_EQ(parse(R"({"checkpoint": {"dir": "ckpt", "interval": 5}})").checkpoint.interval, 5);  // available
  EXPECT_TRUE(parse(R"({"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": true}})")
                  .zero.stage3_gather_16bit_weights_on_model_save);  // available
  // The optimizer offloaded to the CPU is available, also by the deprecated switch.
  EXPECT_EQ(parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})")
                .zero.offload_optimizer.device,
            "cpu");
  EXPECT_EQ(parse(R"({"zero_optimization": {"stage": 1, "cpu_offload": true}})").zero.offload_optimizer.device, "cpu");
  // The optimizer offloaded to NVMe is available in stages 1-3 (the swap
  // directory is checked when the run starts, not here).
  for (int stage : {1, 2, 3}) {
    const Config c = parse(R"({"zero_optimization": {"stage": )" + std::to_string(stage) +
                           R"(, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}})");
    EXPECT_EQ(c.zero.offload_optimizer.device, "nvme");
    EXPECT_EQ(c.zero.offload_optimizer.nvme_path, "/nvme");
  }
  // Parameters offloaded to the CPU are available.
  EXPECT_EQ(parse(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                                            "offload_optimizer": {"device": "cpu"}}})")
                .zero.offload_param.device,
            "cpu");
  // The delayed update is available with an offloaded optimizer.
  EXPECT_TRUE(parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                        "offload": {"delayed_update": true}})")
                  .offload.delayed_update);

  // The rows are also checked on the table directly: neither the optimizer
  // nor the parameters on NVMe have a row any more.
  Config cfg = parse("{}");
  cfg.zero.stage = 3;
  cfg.zero.offload_optimizer.device = "nvme";
  cfg.zero.offload_optimizer.nvme_path = "/nvme";
  EXPECT_NO_THROW(check_available_features(cfg));
  cfg.zero.offload_param.device = "nvme";
  cfg.zero.offload_param.nvme_path = "/nvme";
  EXPECT_NO_THROW(check_available_features(cfg));
  EXPECT_EQ(parse(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme"},
                                            "offload_optimizer": {"device": "cpu"}}})")
                .zero.offload_param.device,
            "nvme");
}

TEST(ConfigErrors, OffloadWithAStageThatDoesNotUseItNamesKeyAndStage) {
  // DeepSpeed accepts offload_param in stages 1-2 and ignores it; ztrain
  // refuses it rather than let it look as if parameters were offloaded.
  for (int stage : {0, 1, 2}) {
    EXPECT_EQ(parse_error(R"({"zero_optimization": {"stage": )" + std::to_string(stage) +
                          R"(, "offload_param": {"device": "cpu"}}})"),
              "config.json: zero_optimization.offload_param.device: \"cpu\" needs ZeRO stage 3 (only stage 3 "
              "partitions the parameters), found stage " + std::to_string(stage) +
                  "; set zero_optimization.stage to 3 or offload_param.device to \"none\"");
  }
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "nvme",
                                                          "nvme_path": "/nvme"}}})"),
                  "zero_optimization.offload_param.device: \"nvme\" needs ZeRO stage 3");
  // The deprecated switch is named when it is what was given.
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 2, "cpu_offload_param": true}})"),
                  "config.json: zero_optimization.cpu_offload_param: \"cpu\" needs ZeRO stage 3");

  // Stage 0 has no optimizer partition to offload.
  EXPECT_EQ(parse_error(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})"),
            "config.json: zero_optimization.offload_optimizer.device: \"cpu\" needs ZeRO stage 1, 2 or 3 (the "
            "offloaded optimizer works on the rank's partition), found stage 0; set zero_optimization.stage or "
            "offload_optimizer.device to \"none\"");
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 0, "cpu_offload": true}})"),
                  "config.json: zero_optimization.cpu_offload: \"cpu\" needs ZeRO stage 1, 2 or 3");
  // From the command line, the message says so.
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})",
                              {"zero_optimization.stage=1"}),
                  "found stage 1; set zero_optimization.stage to 3");
  // "none" goes with every stage.
  for (int stage : {0, 1, 2, 3}) {
    const Config cfg = parse(R"({"zero_optimization": {"stage": )" + std::to_string(stage) +
                             R"(, "offload_param": {"device": "none"}, "offload_optimizer": {"device": "none"}}})");
    EXPECT_EQ(cfg.zero.stage, stage);
    EXPECT_TRUE(cfg.warnings.empty());
  }
}

TEST(ConfigErrors, OffloadSectionValues) {
  EXPECT_EQ(parse_error(R"({"offload": {"delayed_update": "yes"}})"),
            "config.json: offload.delayed_update: expected true or false, found \"yes\"");
  EXPECT_EQ(parse_error(R"({"offload": {"delayed_update_warmup": -1}})"),
            "config.json: offload.delayed_update_warmup: expected a non-negative integer, found -1");
  EXPECT_EQ(parse_error(R"({"offload": {"delayed_update_warmup": 2.5}})"),
            "config.json: offload.delayed_update_warmup: expected a non-negative integer, found 2.5");
  EXPECT_CONTAINS(parse_error(R"({"offload": {"aio_backend": "uring"}})"), "config.json: offload.aio_backend: ");
  EXPECT_CONTAINS(parse_error(R"({"offload": {"aio_backend": "uring"}})"), "io_uring");
  EXPECT_CONTAINS(parse_error(R"({"offload": {"aio_backend": 1}})"), "config.json: offload.aio_backend: ");
  EXPECT_EQ(parse_error(R"({"offload": {"delayed_updates": true}})"),
            "config.json: offload.delayed_updates: unknown key; did you mean 'delayed_update'?");
  EXPECT_EQ(parse_error(R"({"offload": true})"), "config.json: offload: expected an object, found true");
  // A key of the section given at the top level is pointed to it.
  EXPECT_CONTAINS(parse_error(R"({"delayed_update": true})"), "did you mean 'offload.delayed_update'?");
}

TEST(ConfigErrors, OffloadSectionNeedsAnOffloadDevice) {
  // The delayed update overlaps the offloaded optimizer step with the next
  // step: without an offloaded optimizer it would do nothing.
  EXPECT_EQ(parse_error(R"({"offload": {"delayed_update": true}})"),
            "config.json: offload.delayed_update: true needs zero_optimization.offload_optimizer.device \"cpu\" or "
            "\"nvme\" (the delayed update overlaps the offloaded optimizer step with the next step's forward and "
            "backward), found \"none\"");
  EXPECT_CONTAINS(parse_error("{}", {"offload.delayed_update=true"}),
                  "offload.delayed_update: true needs zero_optimization.offload_optimizer.device");
  EXPECT_CONTAINS(parse_error("{}", {"offload.delayed_update=true"}), "(set by --set offload.delayed_update=true)");
  // Offloaded parameters alone are not enough.
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
                                  "offload": {"delayed_update": true}})"),
                  "offload.delayed_update: true needs zero_optimization.offload_optimizer.device");
  // Warm-up steps alone are harmless: the default of a feature that is off.
  EXPECT_EQ(parse(R"({"offload": {"delayed_update_warmup": 3}})").offload.delayed_update_warmup, 3);

  // The I/O backend is NVMe's: choosing one without NVMe offload is a mistake.
  for (const char* backend : {"io_uring", "threads"}) {
    EXPECT_EQ(parse_error(std::string(R"({"offload": {"aio_backend": ")") + backend + R"("}})"),
              std::string("config.json: offload.aio_backend: \"") + backend +
                  "\" chooses how NVMe offload reads and writes, but neither "
                  "zero_optimization.offload_optimizer.device nor zero_optimization.offload_param.device is "
                  "\"nvme\" (found \"none\" and \"none\"); leave it \"auto\"");
  }
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                         "offload_param": {"device": "cpu"}},
                                  "offload": {"aio_backend": "threads"}})"),
                  "(found \"cpu\" and \"cpu\"); leave it \"auto\"");
}

// The NVMe optimizer's own keys ([Note: NVMe optimizer step] in
// optim/offload_adamw.hpp): each refusal names its key and its numbers.
TEST(ConfigErrors, NvmeOptimizerKeys) {
  const std::string nvme = R"("device": "nvme", "nvme_path": "/nvme")";
  auto zero = [&](const std::string& offload, const std::string& more = "") {
    return R"({"zero_optimization": {"stage": 2, )" + more + R"("offload_optimizer": {)" + nvme + offload + "}}}";
  };
  // Three buffers per sub-group in flight.
  EXPECT_EQ(parse_error(zero(R"(, "buffer_count": 2)")),
            "config.json: zero_optimization.offload_optimizer.buffer_count: 2 is too few for device \"nvme\": each "
            "optimizer sub-group in flight needs 3 buffers (master, exp_avg, exp_avg_sq); give at least 3");
  EXPECT_EQ(parse(zero(R"(, "buffer_count": 3)")).zero.offload_optimizer.buffer_count, 3);
  // Pipelining takes two sets: both keys are named.
  for (const char* key : {"pipeline_read", "pipeline_write"}) {
    const std::string msg = parse_error(zero(std::string(R"(, ")") + key + R"(": true)"));
    EXPECT_CONTAINS(msg, "config.json: zero_optimization.offload_optimizer.buffer_count: 4 buffers hold one sub-group "
                         "in flight (3 buffers each), but " + std::string(key) + " is true, which needs two "
                         "(buffer_count >= 6)");
    EXPECT_CONTAINS(msg, "set pipeline_read and pipeline_write to false");
  }
  EXPECT_CONTAINS(parse_error(zero(R"(, "buffer_count": 5, "pipeline_read": true, "pipeline_write": true)")),
                  "5 buffers hold one sub-group in flight (3 buffers each), but pipeline_read and pipeline_write "
                  "are true");
  EXPECT_TRUE(parse(zero(R"(, "buffer_count": 6, "pipeline_read": true, "pipeline_write": true)"))
                  .zero.offload_optimizer.pipeline_read);
  // The pipeline keys without NVMe would do nothing.
  for (const char* device : {"none", "cpu"}) {
    EXPECT_EQ(parse_error(std::string(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": ")") +
                          device + R"(", "pipeline_write": true}}})"),
              std::string("config.json: zero_optimization.offload_optimizer.pipeline_write: true overlaps the NVMe "
                          "reads and writes of the optimizer states, but device is \"") +
                  device + "\", not \"nvme\"; remove it or set device to \"nvme\"");
  }
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})",
                              {"zero_optimization.offload_optimizer.pipeline_read=true"}),
                  "pipeline_read: true overlaps the NVMe reads and writes");
  // They are offload_optimizer's only (DeepSpeed's schema).
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 3, "offload_param": {"pipeline_read": true}}})"),
                  "config.json: zero_optimization.offload_param.pipeline_read: unknown key");
  // Partial offload is the host's.
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {)" + nvme +
                              R"(, "ratio": 0.5}}})"),
                  "config.json: zero_optimization.offload_optimizer.ratio: partial offload (ratio 0.5 < 1) keeps part "
                  "of the states on the device and the rest in host memory: it needs device \"cpu\", found \"nvme\"");
  // Sub-groups of no element.
  EXPECT_CONTAINS(parse_error(zero("", R"("sub_group_size": 0, )")),
                  "config.json: zero_optimization.sub_group_size: 0 elements: device \"nvme\" of offload_optimizer");
  EXPECT_EQ(parse(R"({"zero_optimization": {"sub_group_size": 0}})").zero.sub_group_size, 0);  // unused without NVMe
}

// DeepSpeed's aio section tunes NVMe offload only: values other than the
// defaults without it are refused by name; the defaults (as copied from
// DeepSpeed's documentation) are accepted.
TEST(ConfigErrors, AioKeysNeedNvmeOffload) {
  EXPECT_EQ(parse_error(R"({"aio": {"queue_depth": 16}})"),
            "config.json: aio.queue_depth: 16 tunes the reads and writes of NVMe offload, but neither "
            "zero_optimization.offload_optimizer.device nor zero_optimization.offload_param.device is \"nvme\" "
            "(found \"none\" and \"none\"); remove it or leave the default 8");
  EXPECT_CONTAINS(parse_error(R"({"aio": {"block_size": 4096}})"), "config.json: aio.block_size: 4096 tunes");
  EXPECT_CONTAINS(parse_error(R"({"aio": {"thread_count": 2}})"), "config.json: aio.thread_count: 2 tunes");
  EXPECT_CONTAINS(parse_error(R"({"aio": {"intra_op_parallelism": 2}})"),
                  "config.json: aio.intra_op_parallelism: 2 tunes");
  EXPECT_CONTAINS(parse_error(R"({"aio": {"single_submit": true}})"), "config.json: aio.single_submit: true tunes");
  EXPECT_CONTAINS(parse_error(R"({"aio": {"overlap_events": false}})"),
                  "config.json: aio.overlap_events: false tunes");
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                                  "aio": {"queue_depth": 4}})"),
                  "(found \"cpu\" and \"none\"); remove it or leave the default 8");
  EXPECT_CONTAINS(parse_error("{}", {"aio.block_size=8192"}), "(set by --set aio.block_size=8192)");
  const Config cfg = parse(R"({"aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1,
                                       "single_submit": false, "overlap_events": true}})");
  EXPECT_EQ(cfg.aio.queue_depth, 8);
  // With NVMe they are the engine's (aio.block_size is checked against the
  // swap directory's alignment when the run starts).
  EXPECT_EQ(parse(R"({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}},
                      "aio": {"block_size": 1000, "queue_depth": 1}})")
                .aio.block_size,
            1000);
}

TEST(ConfigErrors, Fp16AndBf16BothEnabled) {
  EXPECT_EQ(parse_error(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})"),
            "config.json: fp16.enabled: fp16 and bf16 cannot both be enabled; choose one");
}

TEST(ConfigErrors, UnsupportedOptimizerAndSchedulerSettings) {
  EXPECT_CONTAINS(parse_error(R"({"optimizer": {"type": "Lamb"}})"),
                  "config.json: optimizer.type: expected \"AdamW\" or \"Adam\" (ztrain implements AdamW only), found "
                  "\"Lamb\"");
  EXPECT_CONTAINS(parse_error(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})"),
                  "config.json: optimizer.params.adam_w_mode: false (Adam with L2 regularisation) is not supported");
  EXPECT_CONTAINS(parse_error(R"({"optimizer": {"params": {"amsgrad": true}}})"), "optimizer.params.amsgrad: true is not supported");
  EXPECT_CONTAINS(parse_error(R"({"scheduler": {"type": "OneCycle"}})"),
                  "config.json: scheduler.type: \"OneCycle\" is a DeepSpeed scheduler that ztrain does not implement");
  EXPECT_EQ(parse_error(R"({"scheduler": {"type": "WarmupDecayLR", "params": {}}})"),
            "config.json: scheduler.params.total_num_steps: required by scheduler type WarmupDecayLR");
  EXPECT_CONTAINS(parse_error(R"({"scheduler": {"params": {}}})"), "config.json: scheduler.type: missing");
}

TEST(ConfigErrors, InconsistentSettingsWithinASection) {
  EXPECT_CONTAINS(parse_error(R"({"pipeline": {"num_chunks": 2}})"),
                  "config.json: pipeline.num_chunks: 2 chunks per rank need pipe_schedule_name \"interleaved\"");
  EXPECT_CONTAINS(parse_error(R"({"pipeline": {"pipe_schedule_name": "interleaved"}})"),
                  "pipeline.num_chunks: pipe_schedule_name \"interleaved\" needs num_chunks >= 2, found 1");
  EXPECT_EQ(parse_error(R"({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}})"),
            "config.json: zero_optimization.offload_optimizer.nvme_path: required when device is \"nvme\"");
  EXPECT_CONTAINS(parse_error(R"({"zero_optimization": {"stage3_prefetch_bucket_size": 1, "prefetch_bucket_size": 2}})"),
                  "zero_optimization.prefetch_bucket_size: names the same setting as 'stage3_prefetch_bucket_size'");
  EXPECT_CONTAINS(parse_error(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": true}})"),
                  "config.json: bfloat16: names the same setting as 'bf16'");
  EXPECT_CONTAINS(parse_error(R"({"data": {"embedded": true, "train": "x"}})"),
                  "config.json: data.train: cannot be given together with data.embedded: true");
  EXPECT_CONTAINS(parse_error(R"({"data": {"embedded": true, "packing": true}})"),
                  "config.json: data.packing: the built-in corpus has no example boundaries");
  EXPECT_CONTAINS(parse_error(R"({"data": {"embedded": true, "packing": 1}})"), "data.packing");
}

TEST(ConfigErrors, OverrideErrorsNameTheOverride) {
  EXPECT_EQ(parse_error(R"({"train": {"steps": 5}})", {"train.steps.x=3"}),
            "config.json: --set train.steps.x=3: 'train.steps' is a number (5), not an object");
  EXPECT_CONTAINS(parse_error("{}", {"train.steps"}), "--set train.steps: expected KEY=VALUE");
  EXPECT_CONTAINS(parse_error("{}", {"train..steps=1"}), "--set train..steps=1: empty name in key path");
  // A bad value from the command line says where it came from.
  EXPECT_EQ(parse_error("{}", {"train.steps=0"}),
            "config.json: train.steps: expected a positive integer, found 0 (set by --set train.steps=0)");
  nlohmann::json root = {{"model", "tiny"}};
  EXPECT_CONTAINS(user_error([&] { apply_override(root, "model.n_layer=2"); }),
                  "--set model.n_layer=2: 'model' is a string (\"tiny\"), not an object");
  // A VALUE that is not JSON becomes a string: one that is not UTF-8 would
  // have made printing the config throw nlohmann's type_error (found by
  // tests/fuzz/fuzz_config; the same for a key).
  EXPECT_CONTAINS(parse_error("{}", {"model.rope_scaling=\xc2x"}), "not valid UTF-8");
  EXPECT_CONTAINS(parse_error("{}", {"data.tr\xffin=a.bin"}), "not valid UTF-8");
}

TEST(ConfigErrors, PrometheusSection) {
  EXPECT_EQ(parse_error(R"({"prometheus": {"enabled": true, "prot": 9000}})"),
            "config.json: prometheus.prot: unknown key; did you mean 'port'?");
  EXPECT_EQ(parse_error(R"({"prometheus": {"push_gateway": "x"}})"),
            "config.json: prometheus.push_gateway: unknown key; known keys here: enabled, port, textfile_dir");
  EXPECT_CONTAINS(parse_error(R"({"prometheus": {"port": 70000}})"), "prometheus.port: expected 0..65535, found 70000");
  EXPECT_CONTAINS(parse_error(R"({"prometheus": {"enabled": true, "port": 0}})"),
                  "prometheus.port: 0 (no HTTP server) needs prometheus.textfile_dir");
  const Config c = parse(R"({"prometheus": {"enabled": true, "port": 0, "textfile_dir": "/tmp/t"}})");
  EXPECT_TRUE(c.prometheus.enabled);
  EXPECT_EQ(c.prometheus.port, 0);
  EXPECT_EQ(c.prometheus.textfile_dir, "/tmp/t");
  EXPECT_FALSE(parse("{}").prometheus.enabled);
}

TEST(ConfigErrors, FileErrors) {
  EXPECT_CONTAINS(user_error([] { load_config("/nonexistent-dir/ds_config.json"); }),
                  "/nonexistent-dir/ds_config.json: cannot open config file");

  TempFile bad("bad.json", "{\n  \"train\": {\"steps\": 10,}\n}\n");
  std::string msg = user_error([&] { load_config(bad.path()); });
  EXPECT_CONTAINS(msg, bad.path() + ": invalid JSON: parse error at line 2");

  TempFile dup("dup.json", R"({"zero_optimization": {"stage": 0, "stage": 2}})");
  EXPECT_EQ(user_error([&] { load_config(dup.path()); }), dup.path() + ": zero_optimization.stage: key given twice");

  TempFile bad_value("bad_value.json", R"({"zero_optimization": {"stage": 9}})");
  EXPECT_EQ(user_error([&] { load_config(bad_value.path()); }),
            bad_value.path() + ": zero_optimization.stage: expected 0..3, found 9");
}

// Hostile files ([Note: config nesting]): each is a UserError naming the file,
// never a crash or a run with defaults.
TEST(ConfigErrors, HostileFilesNameTheFile) {
  TempFile deep("deep.json", std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_EQ(user_error([&] { load_config(deep.path()); }),
            deep.path() + ": nested more than 64 levels deep (objects and arrays): not a ztrain config");
  TempFile deep_obj("deep_obj.json", "{\"a\": " + std::string(70, '[') + std::string(70, ']') + "}");
  EXPECT_CONTAINS(user_error([&] { load_config(deep_obj.path()); }), deep_obj.path() + ": nested more than 64");
  // Brackets inside strings and comments do not count.
  TempFile strings("strings.json", "// [[[[\n{\"log\": {\"dir\": \"" + std::string(100, '[') + "\"}} /* {{{{ */");
  EXPECT_NO_THROW(load_config(strings.path()));
  EXPECT_CONTAINS(parse_error("{}", {"train.steps=" + std::string(100, '[') + std::string(100, ']')}),
                  "--set train.steps=[[[[");
  EXPECT_CONTAINS(parse_error("{}", {"train.steps=" + std::string(100, '[') + std::string(100, ']')}),
                  "VALUE nested more than 64 levels deep");
  for (const char* top : {"null", "[]", "3", "\"x\"", "true", "[{}]"}) {
    TempFile f("top.json", top);
    const std::string msg = user_error([&] { load_config(f.path()); });
    EXPECT_CONTAINS(msg, f.path() + ": the config is ");
    EXPECT_CONTAINS(msg, ", not a JSON object ({...})");
  }
  TempFile huge("huge.json", R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e400}}})");
  const std::string msg = user_error([&] { load_config(huge.path()); });
  EXPECT_CONTAINS(msg, huge.path() + ": invalid JSON: ");
  EXPECT_CONTAINS(msg, "1e400");
  const std::string dir = std::filesystem::path(huge.path()).parent_path().string();
  EXPECT_EQ(user_error([&] { load_config(dir); }),
            dir + ": is a directory, not a config file (a ztrain config is one JSON file)");
}

}  // namespace
}  // namespace zt::test
