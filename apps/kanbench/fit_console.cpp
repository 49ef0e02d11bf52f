#include "fit_console.h"

#include "kan/kan.h"
#include "kan/results/fit_record.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

namespace kanbench {
namespace {

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

// A stage's result as the summary line gives it: a classification has no RMSE.
std::string test_metric(const kan::StageResult& stage) {
  if (std::isnan(stage.test_rmse) && !std::isnan(stage.test_accuracy)) {
    char text[48];
    std::snprintf(text, sizeof text, "test accuracy %.2f%%", 100 * stage.test_accuracy);
    return text;
  }
  return "test RMSE " + scientific(stage.test_rmse);
}

// What progress calls the model: the subject for a KAN kanbench builds ("toy G=5", "toy G=10
// symbolic"), "toy MLP" for its MLP, "toy torchscript" for a model file's.
std::string model_label(const std::string& subject, kan::ModelKind kind, bool from_file) {
  if (from_file)
    return subject + " " + kan::to_string(kind);
  return kind == kan::ModelKind::kMLP ? subject + " MLP" : subject;
}

// A stage as progress names it: "toy G=5", "toy G=5 pruned", "toy G=10 symbolic" (an MLP's,
// which has no grid, "toy MLP").
std::string stage_label(const std::string& label, const kan::PipelineStage& stage) {
  std::string text = label + (stage.grid > 0 ? " G=" + std::to_string(stage.grid) : "");
  if (stage.kind == kan::PipelineStage::Kind::kPrune)
    text += " pruned";
  if (stage.kind == kan::PipelineStage::Kind::kSymbolic)
    text += " symbolic";
  return text;
}

void print_step(const std::string& label, bool tty, const kan::PipelineStage& stage,
                const kan::StepRecord& r) {
  const int64_t done = r.step + 1, steps = stage.steps;
  const int64_t every = std::max<int64_t>(1, steps / 10);
  if (!tty && done % every != 0 && done != steps)
    return;
  const double left = r.seconds / done * (steps - done);
  // A classification has no RMSE: its loss and accuracy instead.
  char metrics[96];
  if (std::isnan(r.train_rmse))
    std::snprintf(metrics, sizeof metrics, "train loss %.3e  test accuracy %.2f%%", r.train_loss,
                  100 * r.test_accuracy);
  else
    std::snprintf(metrics, sizeof metrics, "train rmse %.3e  test rmse %.3e", r.train_rmse,
                  r.test_rmse);
  std::fprintf(stderr, "%s%s step %lld/%lld  %s  %.1f s, ~%.1f s left%s", tty ? "\r" : "",
               stage_label(label, stage).c_str(), static_cast<long long>(done),
               static_cast<long long>(steps), metrics, r.seconds, left,
               tty && done != steps ? "" : "\n");
}

// Findings go to stderr; a clean audit is one line.
void print_audit(const kan::diagnostics::AuditedFit& audited) {
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

// How the fit ran: "lbfgs, 50 steps, 1143 evaluations, float64, cpu, 2.5 s".
std::string run_details(const kan::bench::FitOutcome& outcome,
                        const kan::bench::FitRequest& request) {
  const auto& fit = request.setup.fit;
  const auto& record = outcome.record;
  int64_t evaluations = 0; // LBFGS's line searches evaluate a step's objective many times
  for (const auto& step : record.trained.history.steps)
    evaluations += step.evaluations;
  std::ostringstream text;
  text << kan::to_string(fit.opt()) << ", " << fit.steps() << " steps, "
       << (fit.opt() == kan::Optimizer::kLBFGS ? std::to_string(evaluations) + " evaluations, "
                                               : std::string())
       << kan::to_string(outcome.dtype) << ", " << outcome.device;
  if (const auto& run = record.config.distributed)
    text << ", " << run->world_size << " ranks (" << run->backend << ")";
  text << ", " << scientific(record.seconds()) << " s";
  return text.str();
}

// A KAN's: every stage's test metric, and the formula's lines.
std::string kan_summary(const kan::results::FitRecord& record, const std::string& subject,
                        std::string& formulas) {
  const int64_t grid = kan::results::model_shape(record.config).grid;
  std::string summary = subject + " G=" + std::to_string(grid) + ": " + test_metric(record.trained);
  if (record.pruned)
    summary += ", pruned to " + kan::width_text(record.pruned->width_after) + ": " +
               test_metric(record.pruned->retrained);
  for (const auto& refined : record.refined)
    summary += ", refined " + subject + " G=" + std::to_string(refined.grid) + ": " +
               test_metric(refined.trained);
  if (const auto& symbolic = record.symbolic) {
    summary += ", symbolic: " + test_metric(symbolic->retrained);
    if (symbolic->formula) {
      for (size_t out = 0; out < symbolic->formula->size(); ++out)
        formulas += "formula" +
                    (symbolic->formula->size() > 1 ? " y" + std::to_string(out + 1) : "") + ": " +
                    (*symbolic->formula)[out].sympy + "\n";
    } else {
      formulas = "no formula: " + symbolic->formula_error + "\n";
    }
  }
  return summary;
}

} // namespace

kan::bench::FitProgress fit_console_progress(const kan::bench::FitRequest& request) {
  struct State {
    std::string label;
    bool tty = isatty(fileno(stderr));
  };
  auto state = std::make_shared<State>();
  kan::bench::FitProgress progress;
  progress.on_start = [state, from_file = !request.model_file.empty()](const std::string& subject,
                                                                       kan::ModelKind kind) {
    state->label = model_label(subject, kind, from_file);
  };
  progress.on_data = [](const std::string& description) {
    std::fprintf(stderr, "data: %s\n", description.c_str());
  };
  progress.on_stage = [state](const kan::PipelineStage& stage, size_t functions) {
    if (stage.kind == kan::PipelineStage::Kind::kSymbolic)
      std::fprintf(stderr, "%s: auto_symbolic over %zu functions...\n",
                   stage_label(state->label, stage).c_str(), functions);
  };
  progress.on_step = [state](const kan::PipelineStage& stage, const kan::StepRecord& step) {
    print_step(state->label, state->tty, stage, step);
  };
  progress.on_audit = print_audit;
  return progress;
}

std::string fit_summary(const kan::bench::FitOutcome& outcome,
                        const kan::bench::FitRequest& request) {
  const auto& record = outcome.record;
  const auto& subject = outcome.subject;
  std::ostringstream text;
  if (!request.model_file.empty()) {
    text << subject << " " << record.config.model_kind << " " << request.model_file << ": "
         << test_metric(record.trained) << " (" << *record.parameters << " parameters; "
         << run_details(outcome, request) << ") -> " << outcome.fit_json << "\n";
  } else if (request.setup.model_kind == kan::ModelKind::kMLP) {
    const auto& mlp = request.setup.mlp;
    text << subject << " MLP " << c10::IntArrayRef(mlp.width()) << " "
         << kan::to_string(mlp.activation()) << ": " << test_metric(record.trained) << " ("
         << *record.parameters << " parameters, " << *record.forward_flops << " FLOPs per sample; "
         << run_details(outcome, request) << ") -> " << outcome.fit_json << "\n";
  } else {
    std::string formulas;
    text << kan_summary(record, subject, formulas) << " (" << run_details(outcome, request)
         << ") -> " << outcome.fit_json << "\n"
         << formulas;
  }
  return text.str();
}

} // namespace kanbench
