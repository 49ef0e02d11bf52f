#pragma once
// What `kanbench fit` prints: progress and the device audit on stderr while it trains
// (kan::bench::FitProgress), the summary line on stdout when it is done.

#include "kan/bench/fit.h"

#include <string>

namespace kanbench {

/// Progress on stderr: one rewritten line on a terminal, a line every tenth of a stage otherwise;
/// the data file's description, the start of auto_symbolic (seconds to minutes before its
/// stage's first step), and the device audit (its findings, or one line when clean).
kan::bench::FitProgress fit_console_progress(const kan::bench::FitRequest& request);

/// The summary of a finished fit, ending in fit.json's path: "toy G=5: test RMSE 1.2e-3 (lbfgs,
/// 50 steps, 1143 evaluations, float64, cpu, 2.5 s) -> DIR/fit.json", each later stage's metric
/// and a KAN's formula lines; an MLP's or a model file's with its size.
std::string fit_summary(const kan::bench::FitOutcome& outcome,
                        const kan::bench::FitRequest& request);

} // namespace kanbench
