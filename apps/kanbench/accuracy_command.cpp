// `kanbench accuracy`: the options of kan::bench::run_accuracy (kan/bench/accuracy.h) on the
// command line. DIR/results.json is rewritten (atomically) after every finished fit, so a killed
// run continues where it stopped when started again with the same --out; DIR/report.html at the
// end.
#include "commands.h"
#include "option_checks.h"

#include "kan/bench/accuracy.h"
#include "kan/bench/shards.h"
#include "kan/diagnostics/environment.h"
#include "kan/io/atomic_file.h"
#include "kan/reports/html_report.h"
#include "kan/results/results_io.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>

namespace kanbench {
namespace {

struct AccuracyArgs {
  kan::bench::AccuracyOptions options;
  std::string out = "kanbench-out/accuracy";
  ShardArgs shard;
};

std::string scientific(std::optional<double> value) {
  if (!value || std::isnan(*value))
    return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", *value);
  return text;
}

std::string minutes(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, seconds < 120 ? "%.0f s" : "%.1f min",
                seconds < 120 ? seconds : seconds / 60);
  return text;
}

// "best KAN 1.2e-04 ([2,5,1] G=20, 134 parameters)".
std::string best_text(const kan::results::AccuracyRun& run,
                      const std::optional<kan::results::AccuracyPointRef>& best) {
  if (!best)
    return "-";
  const auto& fit = run.fits.at(best->fit);
  const auto& point = fit.points.at(best->point);
  return scientific(point.test_rmse) + " (" + kan::results::width_text(fit.width) +
         (fit.family == "kan" ? " G=" + std::to_string(point.grid) : " " + fit.activation) + ", " +
         std::to_string(point.parameters) + " parameters)";
}

std::string summary_line(const kan::results::AccuracyRun& run,
                         const kan::results::AccuracyFunction& f) {
  std::string line = f.function + (run.devices.size() > 1 ? " on " + f.device : "") +
                     ": best KAN " + best_text(run, f.best_kan) + ", best MLP " +
                     best_text(run, f.best_mlp);
  if (f.kan_beats_mlp)
    line += *f.kan_beats_mlp ? ": KAN <= MLP" : ": MLP < KAN";
  if (f.published)
    line += "; paper: best KAN " + scientific(f.published->best_kan_test_rmse) + ", MLP " +
            scientific(f.published->mlp_test_rmse);
  if (f.failed)
    line += "; " + std::to_string(f.failed) + " fit(s) failed";
  return line;
}

// A results document for --out: a new one, or the interrupted run's, which a.options.resume
// then continues.
kan::results::Results continued_results(AccuracyArgs& a, const std::string& path) {
  kan::results::Results results;
  if (std::filesystem::exists(path)) {
    auto previous = kan::results::read_results_file(path);
    TORCH_CHECK(previous.accuracy, "--out ", a.out, " holds ", path,
                " of another command (no accuracy section): use another --out");
    const auto was = previous.config.shard, is = a.options.shard;
    TORCH_CHECK(was.has_value() == is.has_value() && (!was || was->text() == is->text()), "--out ",
                a.out, " holds ", was ? "shard " + was->text() : std::string("an unsharded run"),
                ", not ", is ? "shard " + is->text() : std::string("an unsharded run"),
                ": use another --out");
    results.run_id = previous.run_id; // the same run, continued
    a.options.resume = *previous.accuracy;
  }
  return results;
}

// "sin_1 kan [1,1] seed 0: test RMSE 1.2e-04 (20 parameters)", or why it failed.
std::string fit_text(const kan::results::AccuracyFit& fit) {
  std::string what = fit.function + " " + fit.family + " " + kan::results::width_text(fit.width) +
                     (fit.activation.empty() ? "" : " " + fit.activation) + " seed " +
                     std::to_string(fit.seed);
  if (!fit.error.empty())
    return what + ": failed: " + fit.error;
  return what + ": test RMSE " + scientific(fit.points.back().test_rmse) + " (" +
         std::to_string(fit.points.back().parameters) + " parameters)";
}

// The progress lines on stderr, one per finished fit with the time left, and on stdout each
// function's summary once its last fit is done. The time left is the pace of the fits finished
// so far, in expected cost a second (kan::bench::expected_cost), times the cost still to run:
// one wide MLP to go is most of a run.
class Progress {
public:
  Progress(const std::vector<kan::bench::AccuracyModel>& models,
           const kan::results::AccuracyRun& planned,
           const std::optional<kan::results::AccuracyRun>& resume) {
    std::set<std::string> done;
    if (resume)
      for (const auto& fit : resume->fits) {
        ++finished_[{fit.function, fit.device}];
        done.insert(fit.key());
      }
    for (const auto& m : models) {
      ++fits_of_[{m.function, m.device}];
      const double cost = kan::bench::expected_cost(m, planned);
      cost_of_[m.key()] = cost;
      if (!done.count(m.key()))
        time_left_.add(cost);
    }
    for (const auto& [key, count] : fits_of_)
      functions_done_ += finished_[key] >= count;
  }

  void fit_done(const kan::results::AccuracyRun& run, const kan::results::AccuracyFit& fit) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const auto cost = cost_of_.find(fit.key());
    time_left_.finished(cost != cost_of_.end() ? cost->second : 0.0, elapsed);
    const double left = std::max(0.0, time_left_.seconds_left());
    const std::string time = minutes(elapsed) + " elapsed, ~" + minutes(left) + " left";
    std::fprintf(stderr, "[%zu/%lld] %s, %s; %s\n", run.fits.size(),
                 static_cast<long long>(run.planned_fits), fit_text(fit).c_str(),
                 minutes(fit.seconds).c_str(), time.c_str());
    const std::pair<std::string, std::string> key{fit.function, fit.device};
    if (++finished_[key] == fits_of_[key]) {
      ++functions_done_;
      for (const auto& f : run.summary)
        if (f.function == fit.function && f.device == fit.device)
          std::printf("[function %zu/%zu] %s; %s\n", functions_done_, fits_of_.size(),
                      summary_line(run, f).c_str(), time.c_str());
      std::fflush(stdout);
    }
  }

private:
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::map<std::string, double> cost_of_; // by fit key
  kan::bench::TimeLeft time_left_;        // of this session's fits
  std::map<std::pair<std::string, std::string>, int64_t> fits_of_, finished_; // (function, device)
  size_t functions_done_ = 0;
};

void print_plan(const kan::results::AccuracyRun& planned, const kan::bench::AccuracyOptions& o,
                const std::string& path) {
  if (o.resume) {
    std::cerr << "resuming " << path << ": " << o.resume->fits.size() << " of "
              << planned.planned_fits << " fits done; skipping them\n";
  }
  std::cerr << "accuracy: " << planned.table << " table, " << planned.preset << " preset, "
            << planned.functions.size() << " functions x " << planned.devices.size()
            << " device(s), " << planned.planned_fits << " fits";
  if (o.shard)
    std::cerr << " (shard " << o.shard->text() << " of the plan, by " << o.shard->source << ")";
  std::cerr << ", " << planned.jobs << " at once (" << planned.threads_per_fit
            << " thread(s) each)\n";
}

void print_summary(const kan::results::AccuracyRun& run, const std::string& path,
                   const std::string& report) {
  std::cout << "\n";
  for (const auto& f : run.summary)
    std::cout << summary_line(run, f) << "\n";
  std::cout << kan::results::finding_text(run) << "; " << run.fits.size() << " fits in "
            << minutes(run.wall_seconds) << " -> " << path << ", " << report << "\n";
}

int run_accuracy_command(AccuracyArgs& a) {
  namespace fs = std::filesystem;
  a.options.shard = resolve_shard(a.shard, a.out);
  kan::io::check_output_folder(a.out, "--out");
  const auto path = (fs::path(a.out) / "results.json").string();
  const auto report = (fs::path(a.out) / "report.html").string();
  kan::io::check_output_file(path, "--out");
  kan::io::check_output_file(report, "--out");
  auto results = continued_results(a, path);
  // The plan first: bad options fail before anything runs, and progress knows each function's
  // number of fits.
  std::vector<kan::bench::AccuracyModel> models;
  const auto planned = kan::bench::plan_accuracy(a.options, &models);
  print_plan(planned, a.options, path);

  results.environment = kan::diagnostics::collect_environment();
  results.config.suite = "accuracy";
  results.config.devices = planned.devices;
  results.config.out = a.out;
  results.config.shard = a.options.shard;

  Progress progress(models, planned, a.options.resume);
  a.options.on_fit = [&](const kan::results::AccuracyRun& run,
                         const kan::results::AccuracyFit* fit) {
    results.accuracy = run;
    results.wall_seconds = run.wall_seconds;
    kan::results::write_results_file(path, results);
    if (fit)
      progress.fit_done(run, *fit);
  };
  const auto run = kan::bench::run_accuracy(a.options);
  results.accuracy = run;
  results.wall_seconds = run.wall_seconds;
  std::vector<std::string> failures;
  write_results_and_report(results, a.out, "kanbench accuracy: " + run.table + " table", failures);
  print_summary(run, path, report);
  return finish_command(kan::results::run_problems(results), failures);
}

} // namespace

void add_accuracy_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<AccuracyArgs>();
  auto& o = args->options;
  auto* cmd = app.add_subcommand(
      "accuracy", "Re-measure the KAN paper's accuracy tables: KANs and MLPs on its special "
                  "functions or Feynman equations (docs/accuracy.md)");
  cmd->add_option("--table", o.table, "special (Table 1) or feynman (Table 2)")
      ->check(CLI::IsMember({"special", "feynman"}))
      ->capture_default_str();
  cmd->add_option("--functions", o.functions,
                  "Only these functions of the table, comma separated (`kanbench functions` "
                  "lists them); default: all")
      ->delimiter(',');
  cmd->add_option("--preset", o.preset,
                  "quick (1 seed, the paper's minimal KAN shapes and two MLPs, G = 3..20, 100 "
                  "steps per grid) or paper (the paper's protocol: 3 seeds, KANs of width 5 and "
                  "depth 2-6 plus its minimal and best shapes, MLPs of width 5 and 100 and depth "
                  "2-6, G = 3..200, 200 LBFGS steps per grid)")
      ->check(CLI::IsMember({"quick", "paper"}))
      ->capture_default_str();
  cmd->add_option("--devices", o.devices, "Devices each fit runs on, comma separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--jobs", o.jobs,
                  "Fits at once (default: the machine's cores / --threads-per-fit)")
      ->check(integer_at_least(1));
  cmd->add_option("--threads-per-fit", o.threads_per_fit, "Intra-op CPU threads of each fit")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--seeds", o.seeds, "Seeds, comma separated (default: the preset's)")
      ->delimiter(',')
      ->check(unsigned_64());
  cmd->add_option("--steps", o.steps, "LBFGS steps per grid (default: the preset's)")
      ->check(integer_at_least(1));
  cmd->add_option("--grids", o.grids,
                  "The KANs' grid schedule, comma separated and growing (default: the preset's)")
      ->delimiter(',')
      ->check(integer_at_least(1));
  cmd->add_flag("--prune", o.prune,
                "paper preset: add the paper's sparsified and pruned KANs (lamb 1e-2 and 1e-3, "
                "then pykan's prune) for every width-5 KAN");
  cmd->add_option("--train-num", o.train_num, "Training samples per function")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--test-num", o.test_num, "Test samples per function")
      ->check(integer_at_least(1))
      ->capture_default_str();
  add_shard_options(*cmd, args->shard, "fits");
  cmd->add_option("--out", args->out,
                  "Output folder for results.json (rewritten after every fit; a rerun with the "
                  "same --out continues it) and report.html")
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_accuracy_command(*args); });
}

} // namespace kanbench
