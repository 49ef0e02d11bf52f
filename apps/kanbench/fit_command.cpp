// `kanbench fit`: the options of kan::bench::run_fit (kan/bench/fit.h) on the command line:
// train a KAN (a new one, or a pykan checkpoint's) on a named reference function or the user's data
// file, optionally prune it, extend its grid and fix its edges to symbolic functions, training
// again after each; or the MLP baseline, or a model file's model, trained once. Writes
// DIR/fit.json and DIR/model.pt; what it prints is fit_console.h's.
#include "commands.h"
#include "data_options.h"
#include "fit_console.h"
#include "option_checks.h"

#include "kan/bench/fit.h"
#include "kan/kan.h"

#include <torch/cuda.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace kanbench {
namespace {

// What the command line sets. Numbers, flags and enums are bound straight onto the library's
// option structs (add_fit_command), so each option has one home and one default; only the
// values that need LibTorch to parse stay text until the run.
struct FitArgs {
  kan::results::FitConfig config;
  kan::diagnostics::FitSetup setup = defaults();
  DataArgs data;
  std::string width = "2,5,1";
  std::string mult_arity;         // "": the library's default, 2
  std::string dtype;              // "": float64 for a new model, the checkpoint's with --pykan
  std::string model = "kan";      // kan, mlp, or a model file trained as it is
  bool trust_torchscript = false; // --model FILE may be a TorchScript archive
  std::string out = "kanbench-out/fit";
  std::optional<int64_t> steps_after_prune; // unset: --steps
  bool symbolic = false;
  kan::SymbolicStage symbolic_stage; // pykan's auto_symbolic defaults
  std::optional<std::string> lib;    // unset: the whole library
  bool distributed = false;          // one rank of a torchrun launch
  kan::DataParallelOptions data_parallel;

  // The library's defaults, except pykan's reference run: 50 steps, float64.
  static kan::diagnostics::FitSetup defaults() {
    kan::diagnostics::FitSetup setup;
    setup.fit.steps(50);
    return setup;
  }
};

// --lib's names, each checked against the library.
std::vector<std::string> symbolic_library(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream list(text);
  for (std::string name; std::getline(list, name, ',');) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    try {
      kan::symbolic_function(name);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "--lib ", text, ": ", e.what_without_backtrace());
    }
    names.push_back(name);
  }
  TORCH_CHECK(!names.empty(), "--lib: the library is empty; name at least one function");
  return names;
}

// --width of an MLP: plain node counts, checked as a KAN's are.
std::vector<int64_t> mlp_width(const std::string& text) {
  kan::KANOptions parsed({1, 1});
  set_width(parsed, text);
  TORCH_CHECK(!kan::has_mult_nodes(parsed), "--width ", shown(text),
              ": an MLP has no multiplication nodes; give one node count per layer");
  return parsed.width();
}

// Whether --model names a file (kan and mlp are the kinds kanbench builds).
bool is_model_file(const FitArgs& a) {
  return a.model != "kan" && a.model != "mlp";
}

// What only a KAN has, refused for --model mlp with one line naming the option (and --activation,
// an MLP's, for a KAN): silently ignoring it would train something other than what was asked.
void check_model_options(const CLI::App& cmd, const FitArgs& a) {
  const auto& setup = a.setup;
  if (is_model_file(a)) {
    for (const char* name :
         {"--pykan", "--width", "--activation", "--grid", "--k", "--backend", "--mult-arity",
          "--affine-trainable", "--prune", "--steps-after-prune", "--refine", "--symbolic"})
      TORCH_CHECK(cmd.count(name) == 0, name, " describes a model kanbench builds; --model ",
                  a.model,
                  " trains the model in that file as it is (one stage, no pruning, "
                  "refinement or symbolic stage)");
    return;
  }
  TORCH_CHECK(!a.trust_torchscript, "--trust-torchscript needs --model FILE (a TorchScript "
                                    "archive)");
  if (setup.model_kind == kan::ModelKind::kKAN) {
    TORCH_CHECK(cmd.count("--activation") == 0,
                "--activation is an MLP's option (--model mlp); a KAN's edges learn their own");
    return;
  }
  for (const char* name :
       {"--pykan", "--grid", "--k", "--backend", "--mult-arity", "--affine-trainable", "--prune",
        "--steps-after-prune", "--refine", "--symbolic", "--lamb-l1", "--lamb-entropy",
        "--lamb-coef", "--lamb-coefdiff", "--no-update-grid", "--grid-update-num",
        "--stop-grid-update-step"})
    TORCH_CHECK(cmd.count(name) == 0, name,
                " is a KAN's option; --model mlp trains an MLP (its options: --width, "
                "--activation)");
  TORCH_CHECK(setup.fit.lamb() == 0, "--lamb ", setup.fit.lamb(),
              ": the regulariser scores a KAN's edges; --model mlp has none (FitOptions::lamb "
              "must be 0)");
}

// The request the options stand for: widths and the library parsed, the later stages' steps
// defaulted to --steps, the launch joined.
kan::bench::FitRequest fit_request(const FitArgs& a) {
  kan::bench::FitRequest request;
  request.config = a.config;
  request.setup = a.setup;
  auto& setup = request.setup;
  request.device = parse_device(a.config.device);
  // Data-parallel: join the launch before any work, so that a bad launch fails first. Each rank
  // trains on its own device (cuda:LOCAL_RANK); rank 0 writes the outputs.
  if (a.distributed)
    request.group = join_launch(request.device, a.data_parallel, "--distributed");
  a.data.check_needs_data();
  // fit's width comes from --width, the model file or the data: --inputs selects columns only.
  TORCH_CHECK(a.data.inputs.empty() || !a.data.data.empty(),
              "--inputs needs --data (the file it reads)");
  setup.fit.loss(a.data.loss_kind());
  TORCH_CHECK(!a.data.data.empty() || setup.fit.loss() == kan::Loss::kMSE, "--loss ", a.data.loss,
              " needs --data (a file whose target column holds integer class labels): the "
              "reference functions are regressions");
  request.data = a.data.data;
  request.data_options = a.data.load_options();
  if (!a.dtype.empty())
    request.dtype = kan::dtype_from_string(a.dtype);
  request.out = a.out;
  if (is_model_file(a)) {
    request.model_file = a.model;
    request.trust_torchscript = a.trust_torchscript;
  } else if (request.config.initial_model.empty()) {
    set_width(setup.model, a.width);
    if (!a.mult_arity.empty())
      set_mult_arity(setup.model, a.mult_arity);
    if (setup.model_kind == kan::ModelKind::kMLP)
      setup.mlp.width(mlp_width(a.width));
  }
  if (setup.prune)
    setup.prune->steps = a.steps_after_prune.value_or(setup.fit.steps());
  if (a.symbolic) {
    auto symbolic = a.symbolic_stage;
    if (a.lib)
      symbolic.lib = symbolic_library(*a.lib);
    symbolic.steps = symbolic.steps.value_or(setup.fit.steps());
    setup.symbolic = symbolic;
  }
  return request;
}

int run_fit(const FitArgs& a) {
  const auto request = fit_request(a);
  const auto outcome = kan::bench::run_fit(request, fit_console_progress(request));
  if (outcome.fit_json.empty())
    return 0; // a rank that does not write
  if (const auto& symbolic = outcome.record.symbolic)
    std::fprintf(stderr, "auto_symbolic: %zu edges in %.1f s\n", symbolic->edges.size(),
                 symbolic->auto_symbolic_seconds);
  std::cout << fit_summary(outcome, request);
  return 0;
}

} // namespace

void add_fit_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<FitArgs>();
  auto& config = args->config;
  auto& setup = args->setup;
  auto& model = setup.model;
  auto& fit = setup.fit;
  auto* cmd = app.add_subcommand("fit", "Train a KAN (pykan's fit), or the MLP baseline, on a "
                                        "reference function or a data file");
  std::vector<std::string> functions;
  for (const auto& f : kan::reference_functions())
    functions.push_back(f.name);
  auto* function = cmd->add_option("--function", config.function,
                                   "Target function (`kanbench functions` lists them)")
                       ->check(CLI::IsMember(functions))
                       ->capture_default_str();
  auto* data = add_data_options(
      cmd, args->data,
      "Train on this data file instead of --function: a CSV file, a NumPy .npy or .npz, or "
      "pykan's create_dataset dict saved with torch.save (docs/formats.md, \"Data files\")",
      "Loss: mse, or cross-entropy (--data's target: one column of integer class labels below "
      "the model's output count; accuracy reported)");
  data->excludes(function);
  auto* pykan = cmd->add_option("--pykan", config.initial_model,
                                "Start from this pykan checkpoint (the prefix given to pykan's "
                                "saveckpt) instead of a new model");
  cmd->add_option("--model", args->model,
                  "kan; mlp: the MLP baseline (nn::Linear layers of --width with --activation "
                  "between them), trained and recorded the same way, KAN-only options refused; "
                  "or a model FILE trained as it is and written back in its format as "
                  "DIR/model.pt: a TorchScript archive (with --trust-torchscript; its input "
                  "width is the data's) or a kanbench checkpoint")
      ->capture_default_str();
  add_trust_torchscript_flag(*cmd, args->trust_torchscript);
  add_enum_option(cmd, "--activation", setup.mlp.activation(),
                  {kan::Activation::kSiLU, kan::Activation::kTanh, kan::Activation::kReLU},
                  "--model mlp: the activation between layers");
  cmd->add_option("--width", args->width,
                  "Nodes per layer, comma separated; a layer with multiplication nodes as "
                  "[addition,multiplication], e.g. 2,[2,1],1 (quote it for the shell); with "
                  "--model mlp the MLP's layer widths, e.g. 2,100,100,1")
      ->capture_default_str()
      ->excludes(pykan);
  cmd->add_option("--mult-arity", args->mult_arity,
                  "Subnodes each multiplication node multiplies: one arity (3), or one per node "
                  "(2,3); default 2")
      ->excludes(pykan);
  cmd->add_flag_callback(
         "--affine-trainable", [&model] { model.affine_trainable(true); },
         "Train the node and subnode affine parameters (pykan's affine_trainable)")
      ->excludes(pykan);
  cmd->add_option("--grid", model.grid(), "Grid intervals G")
      ->check(integer_at_least(1))
      ->capture_default_str()
      ->excludes(pykan);
  cmd->add_option("--k", model.k(), "Spline order k")
      ->excludes(pykan)
      ->check(integer_at_least(0))
      ->capture_default_str();
  add_enum_option(cmd, "--backend", model.backend(),
                  {kan::SplineBackend::kReference, kan::SplineBackend::kFused}, "Spline backend");
  add_enum_option(cmd, "--opt", fit.opt(), {kan::Optimizer::kLBFGS, kan::Optimizer::kAdam},
                  "Optimiser");
  cmd->add_option("--steps", fit.steps(), "Optimisation steps")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--lr", fit.lr(), "Learning rate")
      ->check(finite_number(0, /*exclusive=*/true))
      ->capture_default_str();
  cmd->add_option("--batch", fit.batch(), "Samples per step, -1 = full batch")
      ->check(integer_at_least(-1))
      ->capture_default_str();
  add_enum_option(cmd, "--batch-draw", fit.batch_draw(),
                  {kan::BatchDraw::kPerStep, kan::BatchDraw::kPerEpoch},
                  "per_step: a fresh draw each step (pykan); per_epoch: one permutation per pass "
                  "over the training set");
  cmd->add_option("--lamb", fit.lamb(), "Regularisation strength")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-l1", fit.lamb_l1(), "Weight of the L1 term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-entropy", fit.lamb_entropy(), "Weight of the entropy term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-coef", fit.lamb_coef(), "Weight of the coef L1 term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_option("--lamb-coefdiff", fit.lamb_coefdiff(), "Weight of the coef smoothness term")
      ->check(finite_number(0))
      ->capture_default_str();
  cmd->add_flag_callback(
      "--no-update-grid", [&fit] { fit.update_grid(false); },
      "Keep the grids fixed during training");
  cmd->add_option("--grid-update-num", fit.grid_update_num(), "Grid updates before the stop step")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--stop-grid-update-step", fit.stop_grid_update_step(),
                  "No grid update from this step on")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--seed", config.seed, "Seed of data, model and minibatches")
      ->check(unsigned_64())
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype,
                  "Floating type (default float64; with --pykan, the checkpoint's)")
      ->check(CLI::IsMember({"float32", "float64"}));
  cmd->add_option("--device", config.device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--refine", config.refine,
                  "After training (and pruning), refine to each grid in turn and train again at "
                  "each: one grid (10) or a schedule (5,10,20, the KAN paper's grid extension)")
      ->delimiter(',')
      ->check(integer_at_least(1));
  auto* prune = add_number_pair_option(
      cmd, "--prune",
      [&setup](double node_th, double edge_th) {
        setup.prune = kan::PruneStage{node_th, edge_th, std::nullopt};
      },
      "NODE_TH,EDGE_TH", 0,
      "After training (before --refine), prune as pykan's prune(node_th, edge_th) on the "
      "training inputs and train again");
  cmd->add_option_function<int64_t>(
         "--steps-after-prune", [args](int64_t steps) { args->steps_after_prune = steps; },
         "Steps of the training after --prune (default: --steps)")
      ->check(integer_at_least(0))
      ->needs(prune);
  auto* symbolic = cmd->add_flag("--symbolic", args->symbolic,
                                 "After the other stages, pykan's auto_symbolic on the training "
                                 "inputs (every edge to its best library function), train "
                                 "again, and write the formula");
  cmd->add_option_function<std::string>(
         "--lib", [args](const std::string& names) { args->lib = names; },
         "--symbolic's library, comma separated (default: all of pykan's), e.g. "
         "x,x^2,x^3,x^4,exp,log,sqrt,tanh,sin,abs")
      ->needs(symbolic);
  cmd->add_option("--r2-threshold", args->symbolic_stage.r2_threshold,
                  "--symbolic: an edge whose best R^2 is below this stays numeric (pykan's "
                  "default 0)")
      ->check(finite_number(-1e300))
      ->needs(symbolic);
  cmd->add_option("--weight-simple", args->symbolic_stage.weight_simple,
                  "--symbolic: weight of simplicity against R^2 in the choice, in [0, 1] "
                  "(pykan's default 0.8)")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(symbolic);
  cmd->add_option("--symbolic-search", args->symbolic_stage.search,
                  "--symbolic: how each edge's (a, b) is searched: pykan (pykan's 101 x 101 grid, "
                  "3 searches), zoom (21-point zoomed searches, 5 searches) or newton (the first "
                  "search, then Newton steps: fastest on deep models)")
      ->check(CLI::IsMember(kan::symbolic_search_names()))
      ->capture_default_str()
      ->needs(symbolic);
  cmd->add_option_function<int64_t>(
         "--steps-after-symbolic", [args](int64_t steps) { args->symbolic_stage.steps = steps; },
         "Steps of the training after --symbolic (default: --steps)")
      ->check(integer_at_least(0))
      ->needs(symbolic);
  auto* distributed = cmd->add_flag(
      "--distributed", args->distributed,
      "Train data-parallel as one rank of a torchrun launch (RANK, WORLD_SIZE, LOCAL_RANK, "
      "MASTER_ADDR, MASTER_PORT): Gloo on the CPU, NCCL on cuda:LOCAL_RANK; rank 0 writes --out "
      "(docs/distributed.md)");
  cmd->add_option_function<double>(
         "--distributed-timeout",
         [args](double seconds) { args->data_parallel.timeout_seconds(seconds); },
         "--distributed: seconds a rank waits for the others before it fails (default 300)")
      ->check(CLI::PositiveNumber)
      ->needs(distributed);
  cmd->add_option("--train-num", config.train_num, "Training samples of --function")
      ->check(integer_at_least(1))
      ->capture_default_str()
      ->excludes(data);
  cmd->add_option("--test-num", config.test_num, "Test samples of --function")
      ->check(integer_at_least(1))
      ->capture_default_str()
      ->excludes(data);
  cmd->add_option("--trace-steps", config.trace_steps,
                  "Trace the device of every operation in the first N steps (0: off)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Output folder for fit.json and model.pt")
      ->capture_default_str();
  cmd->callback([args, cmd, &exit_code] {
    if (args->model == "mlp")
      args->setup.model_kind = kan::ModelKind::kMLP;
    check_model_options(*cmd, *args);
    exit_code = run_fit(*args);
  });
}

} // namespace kanbench
