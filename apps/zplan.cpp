// zplan: which layouts of a model fit on a number of GPUs, and how fast and
// at what cost each trains (docs/plan.md).
//
//   zplan --model llama2-70b --gpu a100-80gb --gpus 8 [--gpus-per-node 8]
//         [--host-mem-gib 1024] [--nvme-gib 0] [--global-batch N] [--price X | --spot]
//         [--dtype bf16|f32] [--top 20] [--json] [--figures FILE] [--device-headroom 0.05]
//         [--attention cudnn|flash]
//   zplan --config CONFIG.json ...       # the config's model section
//   zplan ... --gpu h100 --memory-gib 94 --bf16-tflops 835 --hbm-gbs 3900   # a GPU without a preset
//   zplan --model llama2-13b --gpu rtx4090 --gpus 1 --host-mem-gib 128 --largest   # the most layers that fit
//   zplan validate [--figures FILE]      # the time model against every measured run
//
// Memory per GPU is the ZeRO memory estimator's (the figures of `ztrain
// --estimate-memory`); the time model and its figures are [Note: plan time
// model] in zplan_model.cpp and data/plan/figures.json.
#include <boost/program_options.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "core/error.hpp"
#include "modules/model_desc.hpp"
#include "zplan_model.hpp"

namespace po = boost::program_options;
using namespace zt;
using namespace zt::plan;

namespace {

std::string f2(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

int run(int argc, char** argv) {
  std::string model, config, gpu, figures_path = ZT_PLAN_FIGURES, dtype = "bf16", attention = "cudnn";
  int gpus = 0, per_node = 0, top = 20;
  double host_mem = 0, nvme = 0, price = -1, headroom = 0.05;
  int64_t global_batch = 0;
  bool json_out = false, spot = false, largest = false;
  po::options_description opts("Options");
  opts.add_options()
      ("help,h", "print this help")
      ("model", po::value<std::string>(&model), "model preset (gpt2-124m ... llama3-70b)")
      ("config", po::value<std::string>(&config), "a ztrain config: its model section and dtype")
      ("gpu", po::value<std::string>(&gpu), "GPU preset: h200, h100, a100-80gb, rtx4090, mi250x, cpu (the figures file)")
      ("gpus", po::value<int>(&gpus), "number of GPUs")
      ("gpus-per-node", po::value<int>(&per_node), "GPUs per node [the preset's]")
      ("host-mem-gib", po::value<double>(&host_mem), "host memory per node in GiB [0: no CPU offload]")
      ("nvme-gib", po::value<double>(&nvme), "NVMe per node in GiB [0: no NVMe offload]")
      ("device-headroom", po::value<double>(&headroom), "fraction of the GPU's memory a layout leaves free, for the "
       "estimator's error (docs/memory.md) [0.05]")
      ("global-batch", po::value<int64_t>(&global_batch), "sequences per step, the same for every layout [2^19 tokens]")
      ("dtype", po::value<std::string>(&dtype), "bf16 or f32 [bf16; with --config, the config's]")
      ("attention", po::value<std::string>(&attention), "cudnn or flash: the attention the runs will use (flash: "
       "ZTRAIN_ATTENTION=flash, or a build without cuDNN's frontend) [cudnn]")
      ("price", po::value<double>(&price), "USD per GPU-hour [the preset's on-demand price]")
      ("spot", po::bool_switch(&spot), "the preset's spot price")
      ("top", po::value<int>(&top), "layouts listed [20; with --json, all]")
      ("largest", po::bool_switch(&largest), "the deepest model of this width that fits: the most layers of the "
       "model's shape for which some layout fits, and its layouts")
      ("json", po::bool_switch(&json_out), "print the layouts as JSON (with their --set overrides)")
      ("figures", po::value<std::string>(&figures_path), "device figures and measured runs [data/plan/figures.json]")
      ("memory-gib", po::value<double>(), "the GPU's memory in GiB [the preset's]")
      ("bf16-tflops", po::value<double>(), "the GPU's dense bf16 peak: scales the preset's kernel rates")
      ("hbm-gbs", po::value<double>(), "the GPU's memory bandwidth: scales the preset's memory-bound work and AdamW")
      ("busbw-gbs", po::value<double>(), "all-reduce bus bandwidth inside a node (zbench) [the preset's]")
      ("inter-busbw-gbs", po::value<double>(), "bus bandwidth between nodes [the preset's]")
      ("pcie-gbs", po::value<double>(), "host <-> GPU copy bandwidth [the preset's]")
      ("nvme-gbs", po::value<double>(), "NVMe read + write bandwidth per node [the preset's]");
  po::options_description hidden;
  std::string command;
  hidden.add_options()("command", po::value<std::string>(&command));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("command", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    ZT_USER_ERROR("command line: ", e.what(), " (see zplan --help)");
  }
  if (vm.count("help")) {
    std::cout << "usage: zplan --model PRESET|--config FILE --gpu PRESET --gpus N [options]\n"
                 "       zplan validate [--figures FILE]\n\n"
                 "Lists the layouts (ZeRO stage, offload, pipeline, micro-batch, activation checkpointing)\n"
                 "that fit, with memory per GPU from the ZeRO estimator, predicted step time, tokens/s and\n"
                 "cost per billion tokens (docs/plan.md).\n\n"
              << opts << std::flush;
    return 0;
  }
  const Figures figures = load_figures(figures_path);
  if (command == "validate") {
    // validate replays the measured runs of the figures file: a plan option
    // would be ignored.
    for (const auto& [key, value] : vm)
      if (key != "command" && key != "figures" && !value.defaulted())
        ZT_USER_ERROR("command line: --", key, " plans a run; 'zplan validate' takes --figures only");
    std::cout << format_validation(validate(figures)) << std::flush;
    return 0;
  }
  if (!command.empty()) ZT_USER_ERROR("command line: unknown command '", command, "' (plan options, or 'validate')");
  if (model.empty() == config.empty()) ZT_USER_ERROR("command line: give one of --model PRESET or --config FILE");
  if (gpu.empty()) ZT_USER_ERROR("command line: --gpu PRESET is required");
  if (!vm.count("gpus")) ZT_USER_ERROR("command line: --gpus N is required");
  if (gpus < 1) ZT_USER_ERROR("command line: --gpus: expected at least one GPU, found ", gpus);
  if (vm.count("gpus-per-node") && per_node < 1)
    ZT_USER_ERROR("command line: --gpus-per-node: expected at least 1, found ", per_node);
  for (const auto& [key, v] : {std::pair<const char*, double>{"host-mem-gib", host_mem}, {"nvme-gib", nvme}})
    if (!(v >= 0) || !std::isfinite(v))
      ZT_USER_ERROR("command line: --", key, ": expected a number of GiB >= 0, found ", v);
  if (vm.count("price") && (!(price >= 0) || !std::isfinite(price)))
    ZT_USER_ERROR("command line: --price: expected USD per GPU-hour >= 0, found ", price);
  if (vm.count("global-batch") && global_batch < 1) ZT_USER_ERROR("command line: --global-batch must be >= 1");
  if (top < 1) ZT_USER_ERROR("command line: --top must be >= 1");
  if (!(headroom >= 0 && headroom < 1))
    ZT_USER_ERROR("command line: --device-headroom must be in [0, 1), found ", headroom);
  if (spot && vm.count("price")) ZT_USER_ERROR("command line: --spot and --price exclude each other");
  PlanInput in;
  in.device = with_attention(figures.device(gpu), attention, "command line: --attention");
  // A GPU the presets do not have: a preset with its own numbers, the
  // measured efficiencies kept (rates scale with the peak, memory-bound work
  // with the bandwidth).
  auto given = [&](const char* key) -> std::optional<double> {
    if (!vm.count(key)) return std::nullopt;
    const double v = vm[key].as<double>();
    if (!(v > 0)) ZT_USER_ERROR("command line: --", key, ": expected a positive number, found ", v);
    return v;
  };
  DeviceFigures& d = in.device;
  if (auto v = given("memory-gib")) d.memory_gib = *v;
  if (auto v = given("bf16-tflops")) {
    const double k = *v / d.bf16_tflops;
    for (Curve* c : {&d.gemm_tflops, &d.attention_tflops, &d.flash_attention_tflops, &d.classifier_tflops})
      c->scale(k);
    d.bf16_tflops = *v;
  }
  if (auto v = given("hbm-gbs")) {
    const double k = *v / d.hbm_gbs;
    d.membound_ns_per_kib /= k;
    d.optimizer_gbs *= k;
    d.hbm_gbs = *v;
  }
  if (auto v = given("busbw-gbs")) d.intra_busbw_gbs = *v;
  if (auto v = given("inter-busbw-gbs")) d.inter_busbw_gbs = *v;
  if (auto v = given("pcie-gbs")) d.pcie_gbs = *v;
  if (auto v = given("nvme-gbs")) d.nvme_gbs = *v;
  for (const char* key : {"memory-gib", "bf16-tflops", "hbm-gbs", "busbw-gbs", "inter-busbw-gbs", "pcie-gbs", "nvme-gbs"})
    if (vm.count(key)) {
      d.label += " with the figures given";
      break;
    }
  if (spot) {
    if (!in.device.spot_price_per_hour)
      ZT_USER_ERROR("command line: --spot: no spot price for '", gpu, "' in ", figures.path, " (give --price)");
    price = in.device.spot_price_per_hour;
  }
  if (!config.empty()) {
    std::ifstream f(config);
    if (!f) ZT_USER_ERROR(config, ": cannot open the config");
    nlohmann::json c;
    try {
      c = nlohmann::json::parse(f, nullptr, true, true);
    } catch (const nlohmann::json::exception& e) {
      ZT_USER_ERROR(config, ": not valid JSON (", e.what(), ")");
    }
    in.model = c.value("model", nlohmann::json::object());
    if (!vm.count("dtype")) dtype = c.contains("bf16") && c["bf16"].value("enabled", false) ? "bf16" : "f32";
  } else {
    in.model = {{"preset", model}};
  }
  if (dtype != "bf16" && dtype != "f32") ZT_USER_ERROR("command line: --dtype: expected bf16 or f32, found '", dtype, "'");
  in.dtype = dtype;
  in.gpus = gpus;
  in.gpus_per_node = per_node;
  in.host_mem_gib = host_mem;
  in.nvme_gib = nvme;
  in.device_headroom = headroom;
  in.global_batch = global_batch;
  in.price_per_hour = price;
  std::string notes;
  std::string header_note;
  if (largest) {
    // Whether anything fits only grows as layers are removed: search the
    // largest layer count with a layout that fits (the estimator decides).
    auto fits = [&](int64_t layers) {
      PlanInput t = in;
      t.model["n_layer"] = layers;
      return !zt::plan::plan(t).empty();
    };
    if (!fits(1)) ZT_USER_ERROR("--largest: not even one layer of this model fits (embedding and head alone)");
    int64_t lo = 1, hi = 2;
    while (hi <= (int64_t{1} << 16) && fits(hi)) {
      lo = hi;
      hi *= 2;
    }
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    in.model["n_layer"] = lo;
    const Config c = parse_layout(in.model, in.dtype, Layout{});
    const ModelDesc m = describe_model(c.model);
    header_note = "largest: " + std::to_string(lo) + " layers of this shape (" +
                  f2("%.2f", static_cast<double>(m.num_params()) / 1e9) + " B parameters) fit; " +
                  std::to_string(lo + 1) + " do not\n";
  }
  const std::vector<PlanRow> rows = zt::plan::plan(in, &notes);
  const double usd = price >= 0 ? price : in.device.price_per_hour;
  if (json_out) {
    nlohmann::json out = nlohmann::json::array();
    const size_t listed = vm.count("top") ? std::min(rows.size(), static_cast<size_t>(top)) : rows.size();
    for (size_t k = 0; k < listed; ++k) {
      const PlanRow& r = rows[k];
      nlohmann::json sets = r.layout.sets();
      out.push_back({{"layout", r.layout.name()},
                     {"world", r.layout.gpus},
                     {"zero_stage", r.layout.zero_stage},
                     {"offload_optimizer", r.layout.offload_optimizer},
                     {"offload_param", r.layout.offload_param},
                     {"P", r.layout.P},
                     {"V", r.layout.V},
                     {"micro_batch", r.layout.micro_batch},
                     {"accumulation", r.layout.accumulation},
                     {"breadth_first_group", r.layout.group},
                     {"checkpointing", r.layout.checkpointing},
                     {"cpu_checkpointing", r.layout.cpu_checkpointing},
                     {"device_bytes", r.memory.total()},
                     {"host_bytes_per_rank", r.memory.host()},
                     {"step_s", r.time.step},
                     {"tokens_per_s", r.time.tokens_per_s},
                     {"usd_per_billion_tokens", r.cost_per_btok},
                     {"sets", sets}});
    }
    std::cout << nlohmann::json({{"gpu", in.device.key}, {"gpus", gpus}, {"memory_gib", in.device.memory_gib}, {"device_headroom", headroom}, {"attention", attention}, {"model", in.model},
                                 {"notes", notes}, {"layouts", out}})
                     .dump(1)
              << "\n";
    return 0;
  }
  const std::string what = config.empty() ? model : config;
  std::cout << "zplan: " << what << " on " << gpus << " x " << in.device.label << " (" << in.device.memory_gib
            << " GiB each, " << (per_node > 0 ? per_node : in.device.gpus_per_node) << " per node), host "
            << host_mem << " GiB and NVMe " << nvme << " GiB per node, $" << f2("%.2f", usd) << " per GPU-hour\n";
  std::cout << "  " << notes << "; memory per GPU from the ZeRO estimator (ztrain --estimate-memory) within "
            << f2("%.0f", 100.0 * (1.0 - headroom)) << "% of the GPU's, times from the figures in " << figures.path
            << "\n";
  if (!header_note.empty()) std::cout << "  " << header_note;
  std::cout << "\n";
  if (rows.empty()) {
    std::cout << "no layout fits: more GPUs, more host memory (--host-mem-gib) or NVMe (--nvme-gib)\n";
    return 1;
  }
  std::cout << "| layout | GiB/GPU | host GiB/node | step s | tokens/s | $/B tokens |\n"
            << "| --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (size_t i = 0; i < rows.size() && static_cast<int>(i) < top; ++i) {
    const PlanRow& r = rows[i];
    std::cout << "| " << r.layout.name() << " | " << f2("%.1f", static_cast<double>(r.memory.total()) / 1073741824.0)
              << " | " << f2("%.0f", r.host_gib_per_node) << " | " << f2("%.3g", r.time.step) << " | "
              << f2("%.0f", r.time.tokens_per_s) << " | " << f2(r.cost_per_btok >= 100 ? "%.0f" : "%.3g", r.cost_per_btok) << " |\n";
  }
  if (static_cast<int>(rows.size()) > top) std::cout << "(" << rows.size() - top << " more; --top N)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UserError& e) {
    std::cerr << "zplan: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zplan: error: " << e.what() << "\n";
    return 1;
  }
}
