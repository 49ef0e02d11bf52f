// `kanbench fit`: train a KAN on a named reference function, optionally refine its grid and
// train again; write DIR/fit.json (configuration, history, final RMSE) and DIR/model.pt.
#include "commands.h"
#include "values.h"

#include "kan/diagnostics/audited_fit.h"
#include "kan/io/atomic_file.h"
#include "kan/kan.h"
#include "kan/memory.h"

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/version.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

namespace kanbench {
namespace {

constexpr const char* kFitSchemaVersion =
    "1.2.0"; // 1.1: device_audit, config.trace_steps; 1.2: config.fit.batch_draw

struct FitArgs {
  // The library's defaults, so the command line cannot drift from them.
  inline static const kan::FitOptions kFit{};
  inline static const kan::KANOptions kModel{{2, 5, 1}};

  std::string function = "toy";
  std::string width = "2,5,1";
  int64_t grid = kModel.grid();
  int64_t k = kModel.k();
  std::string backend = kan::to_string(kModel.backend());
  std::string opt = kan::to_string(kFit.opt());
  int64_t steps = 50; // pykan's reference run (the library's default is 100)
  double lr = kFit.lr();
  int64_t batch = kFit.batch();
  std::string batch_draw = kan::to_string(kFit.batch_draw());
  double lamb = kFit.lamb();
  double lamb_l1 = kFit.lamb_l1();
  double lamb_entropy = kFit.lamb_entropy();
  double lamb_coef = kFit.lamb_coef();
  double lamb_coefdiff = kFit.lamb_coefdiff();
  bool no_update_grid = !kFit.update_grid();
  int64_t grid_update_num = kFit.grid_update_num();
  int64_t stop_grid_update_step = kFit.stop_grid_update_step();
  uint64_t seed = 0;
  std::string dtype = "float64";
  std::string device = "cpu";
  int64_t refine = 0;
  int64_t train_num = 1000;
  int64_t test_num = 1000;
  int64_t trace_steps = 1;
  std::string out = "results/fit";
};

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

// Progress on stderr: one rewritten line on a terminal, a line every tenth of the run otherwise.
class Progress {
public:
  explicit Progress(std::string label) : label_(std::move(label)), tty_(isatty(fileno(stderr))) {}

  void operator()(const kan::StepRecord& r, int64_t steps) const {
    const int64_t done = r.step + 1;
    const int64_t every = std::max<int64_t>(1, steps / 10);
    if (!tty_ && done % every != 0 && done != steps)
      return;
    const double left = r.seconds / done * (steps - done);
    std::fprintf(stderr,
                 "%s%s step %lld/%lld  train rmse %.3e  test rmse %.3e  %.1f s, ~%.1f s left%s",
                 tty_ ? "\r" : "", label_.c_str(), static_cast<long long>(done),
                 static_cast<long long>(steps), r.train_rmse, r.test_rmse, r.seconds, left,
                 tty_ && done != steps ? "" : "\n");
  }

private:
  std::string label_;
  bool tty_;
};

nlohmann::json to_json(const kan::FitHistory& h) {
  nlohmann::json steps = nlohmann::json::array(), epochs = nlohmann::json::array();
  for (const auto& s : h.steps) {
    steps.push_back({{"step", s.step},
                     {"train_loss", s.train_loss},
                     {"test_loss", s.test_loss},
                     {"train_rmse", s.train_rmse},
                     {"test_rmse", s.test_rmse},
                     {"reg", s.reg},
                     {"seconds", s.seconds},
                     {"grid_updated", s.grid_updated}});
  }
  for (const auto& e : h.epochs) {
    epochs.push_back({{"epoch", e.epoch},
                      {"last_step", e.last_step},
                      {"train_rmse", e.train_rmse},
                      {"test_rmse", e.test_rmse},
                      {"reg", e.reg},
                      {"seconds", e.seconds},
                      {"epoch_seconds", e.epoch_seconds}});
  }
  return {{"steps", steps},
          {"epochs", epochs},
          {"grid_updates", h.grid_updates},
          {"seconds", h.seconds}};
}

nlohmann::json config_json(const FitArgs& a, const kan::KANOptions& model,
                           const kan::FitOptions& fit) {
  return {{"function", a.function},
          {"train_num", a.train_num},
          {"test_num", a.test_num},
          {"seed", a.seed},
          {"device", a.device},
          {"refine", a.refine},
          {"trace_steps", a.trace_steps},
          {"model", kan::to_json(model)},
          {"fit",
           {{"opt", kan::to_string(fit.opt())},
            {"steps", fit.steps()},
            {"lr", fit.lr()},
            {"batch", fit.batch()},
            {"batch_draw", kan::to_string(fit.batch_draw())},
            {"lamb", fit.lamb()},
            {"lamb_l1", fit.lamb_l1()},
            {"lamb_entropy", fit.lamb_entropy()},
            {"lamb_coef", fit.lamb_coef()},
            {"lamb_coefdiff", fit.lamb_coefdiff()},
            {"update_grid", fit.update_grid()},
            {"grid_update_num", fit.grid_update_num()},
            {"start_grid_update_step", fit.start_grid_update_step()},
            {"stop_grid_update_step", fit.stop_grid_update_step()},
            {"loss", kan::to_string(fit.loss())},
            {"seed", fit.seed()}}}};
}

// Findings go to stderr; a clean audit is one line.
void report_audit(const kan::diagnostics::AuditedFit& audited) {
  if (!audited.clean()) {
    std::cerr << audited.audit.to_text() << audited.trace.to_text();
    return;
  }
  const auto& t = audited.trace.summary;
  if (t.steps == 0)
    return;
  std::fprintf(stderr,
               "device audit: clean (%lld tensors in place; %lld operations traced in %lld "
               "step(s), trace overhead %.3f s)\n",
               static_cast<long long>(audited.audit.summary.tensors_checked),
               static_cast<long long>(t.operations), static_cast<long long>(t.steps),
               t.overhead_seconds);
}

// model.pt and fit.json are one unit: both are written and synced as temporaries first, so a
// full disk leaves both old files; only the two renames remain, and if the second one fails
// the stale fit.json is removed and the error says so.
void write_outputs(const kan::KAN& model, const std::string& checkpoint_path,
                   const std::string& json_path, const std::string& json_text) {
  kan::io::AtomicFile checkpoint(checkpoint_path), json(json_path);
  try {
    kan::save_checkpoint(model,
                         [&](const void* data, size_t size) { checkpoint.write(data, size); });
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "cannot write checkpoint: ", first_line(e.what()));
  }
  json.write(json_text);
  checkpoint.finish();
  json.finish();
  checkpoint.commit();
  try {
    json.commit();
  } catch (const std::runtime_error& e) {
    std::error_code ec;
    std::filesystem::remove(json_path, ec);
    TORCH_CHECK(false, first_line(e.what()), "; ", checkpoint_path, " is new, so the stale ",
                json_path, " of the previous run was ",
                ec ? "left in place: delete it" : "removed");
  }
}

int run_fit(const FitArgs& a) {
  const auto device = parse_device(a.device);
  const auto dtype = kan::dtype_from_string(a.dtype);
  const auto width = parse_width(a.width);
  const auto& function = kan::reference_function(a.function);
  TORCH_CHECK(width.front() == function.n_var, "--width starts with ", width.front(),
              " inputs but function '", a.function, "' has ", function.n_var, " variables");
  TORCH_CHECK(width.back() == 1, "--width must end in 1 output for a regression function, got ",
              width.back());
  kan::io::check_output_folder(a.out, "--out");
  for (const char* name : {"model.pt", "fit.json"})
    kan::io::check_output_file((std::filesystem::path(a.out) / name).string(), "--out");

  const auto model_options =
      kan::KANOptions(width).grid(a.grid).k(a.k).seed(a.seed).device(device).dtype(dtype).backend(
          kan::spline_backend_from_string(a.backend));
  auto fit_options = kan::FitOptions()
                         .opt(kan::optimizer_from_string(a.opt))
                         .steps(a.steps)
                         .lr(a.lr)
                         .batch(a.batch)
                         .batch_draw(kan::batch_draw_from_string(a.batch_draw))
                         .lamb(a.lamb)
                         .lamb_l1(a.lamb_l1)
                         .lamb_entropy(a.lamb_entropy)
                         .lamb_coef(a.lamb_coef)
                         .lamb_coefdiff(a.lamb_coefdiff)
                         .update_grid(!a.no_update_grid)
                         .grid_update_num(a.grid_update_num)
                         .stop_grid_update_step(a.stop_grid_update_step)
                         .seed(a.seed);
  // Refused before anything is allocated: a CPU run past the machine's memory is killed by the
  // kernel without a word, a GPU run fails deep inside a step.
  try {
    kan::check_fits_in_memory(model_options, fit_options, a.train_num, a.test_num);
  } catch (const c10::OutOfMemoryError& e) {
    TORCH_CHECK(false, "--width ", a.width, " --grid ", a.grid, " --train-num ", a.train_num,
                " --batch ", a.batch, " does not fit: ", e.what_without_backtrace());
  }
  const auto data = kan::create_dataset(function.f, kan::DatasetOptions(function.n_var)
                                                        .train_num(a.train_num)
                                                        .test_num(a.test_num)
                                                        .seed(a.seed)
                                                        .device(device)
                                                        .dtype(dtype));
  kan::KAN model(model_options);

  nlohmann::json result{{"schema_version", kFitSchemaVersion},
                        {"command", "fit"},
                        {"config", config_json(a, model_options, fit_options)},
                        {"environment",
                         {{"libtorch", TORCH_VERSION},
                          {"threads", at::get_num_threads()},
                          {"device", device.str()}}}};
  const std::string label = a.function + " G=" + std::to_string(a.grid);
  auto audited = kan::diagnostics::audited_fit(model, data, fit_options.on_step(Progress(label)),
                                               a.trace_steps);
  report_audit(audited);
  result["device_audit"] = audited.to_json();
  const auto& history = audited.history;
  auto final_metrics = kan::evaluate(model, data);
  result["history"] = to_json(history);
  result["train_rmse"] = final_metrics.train_rmse;
  result["test_rmse"] = final_metrics.test_rmse;
  result["seconds"] = history.seconds;
  std::string summary = label + ": test RMSE " + scientific(final_metrics.test_rmse);

  if (a.refine >= 1) {
    model = model->refine(a.refine, data.train_input);
    const std::string refined_label = a.function + " G=" + std::to_string(a.refine);
    const auto refined_history =
        kan::fit(model, data, fit_options.on_step(Progress(refined_label)));
    const auto refined = kan::evaluate(model, data);
    result["refined"] = {{"grid", a.refine},
                         {"history", to_json(refined_history)},
                         {"train_rmse", refined.train_rmse},
                         {"test_rmse", refined.test_rmse},
                         {"seconds", refined_history.seconds}};
    result["refined_test_rmse"] = refined.test_rmse;
    result["seconds"] = history.seconds + refined_history.seconds;
    summary += ", refined " + refined_label + ": test RMSE " + scientific(refined.test_rmse);
  }

  result["checkpoint"] = "model.pt";
  const auto json_path = (std::filesystem::path(a.out) / "fit.json").string();
  write_outputs(model, (std::filesystem::path(a.out) / "model.pt").string(), json_path,
                result.dump(2) + "\n");
  std::cout << summary << " (" << kan::to_string(fit_options.opt()) << ", " << a.steps << " steps, "
            << a.dtype << ", " << device << ", " << scientific(result["seconds"].get<double>())
            << " s) -> " << json_path << "\n";
  return 0;
}

} // namespace

void add_fit_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<FitArgs>();
  auto* cmd = app.add_subcommand("fit", "Train a KAN on a reference function (pykan's fit)");
  std::vector<std::string> functions;
  for (const auto& f : kan::reference_functions())
    functions.push_back(f.name);
  cmd->add_option("--function", args->function, "Target function")
      ->check(CLI::IsMember(functions))
      ->capture_default_str();
  cmd->add_option("--width", args->width, "Layer widths, comma separated")->capture_default_str();
  cmd->add_option("--grid", args->grid, "Grid intervals G")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--k", args->k, "Spline order k")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--backend", args->backend, "Spline backend")
      ->check(CLI::IsMember({"reference", "fused"}))
      ->capture_default_str();
  cmd->add_option("--opt", args->opt, "Optimiser")
      ->check(CLI::IsMember({"lbfgs", "adam"}))
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "Optimisation steps")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--lr", args->lr, "Learning rate")
      ->check(finite_number(0, /*exclusive=*/true))
      ->capture_default_str();
  cmd->add_option("--batch", args->batch, "Samples per step, -1 = full batch")
      ->check(integer_at_least(-1))
      ->capture_default_str();
  cmd->add_option("--batch-draw", args->batch_draw,
                  "per_step: a fresh draw each step (pykan); per_epoch: one permutation per pass "
                  "over the training set")
      ->check(CLI::IsMember({"per_step", "per_epoch"}))
      ->capture_default_str();
  cmd->add_option("--lamb", args->lamb, "Regularisation strength")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-l1", args->lamb_l1, "Weight of the L1 term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-entropy", args->lamb_entropy, "Weight of the entropy term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-coef", args->lamb_coef, "Weight of the coef L1 term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-coefdiff", args->lamb_coefdiff, "Weight of the coef smoothness term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_flag("--no-update-grid", args->no_update_grid, "Keep the grids fixed during training");
  cmd->add_option("--grid-update-num", args->grid_update_num, "Grid updates before the stop step")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--stop-grid-update-step", args->stop_grid_update_step,
                  "No grid update from this step on")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of data, model and minibatches")
      ->check(unsigned_64())
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Floating type")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->capture_default_str();
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--refine", args->refine,
                  "After training, refine to this G and train again (0: no refinement)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--train-num", args->train_num, "Training samples")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--test-num", args->test_num, "Test samples")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--trace-steps", args->trace_steps,
                  "Trace the device of every operation in the first N steps (0: off)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Output folder for fit.json and model.pt")
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_fit(*args); });
}

} // namespace kanbench
