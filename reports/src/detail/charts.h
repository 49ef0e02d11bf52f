#pragma once
// The data behind a run report's charts (everything report.js draws, prepared here so the numbers
// are testable), and the figures and accuracy pieces the report's sections share with them.
// Internal to kan::reports.

#include "kan/results/results.h"
#include "kan/results/statistics.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace kan::reports::detail {

/// A case's epoch times, and what CUPTI saw of its GPU epochs.
struct CaseFigures {
  std::optional<results::Summary> times; ///< of epoch_seconds
  std::optional<double> busy;            ///< median GPU busy fraction
  std::optional<double> kernels;         ///< median kernels per epoch
};
CaseFigures figures(const results::CaseResult& c);

/// The case whose learned activation functions are plotted: the first ok case with curves.
const results::CaseResult* activation_case(const results::Results& r);

/// Every chart the document has data for, in the order the report shows them: {"charts": [...]}.
nlohmann::json chart_data(const results::Results& r);

/// The id prefix of the accuracy charts, one per function and device: chart-accuracy-K.
inline constexpr const char* kAccuracyChartPrefix = "chart-accuracy-";
/// The accuracy chart of the run's summary entry `index`; null when it has nothing to draw.
nlohmann::json accuracy_chart(const results::AccuracyRun& run, size_t index);
/// A run's or a function's time, hours of it readable: "14.5 s", "12.3 min", "5.2 h".
std::string duration_text(double seconds);
/// An RMSE as the accuracy tables show it.
std::string rmse_text(double value);
/// The point a reference names.
const results::AccuracyPoint& point_at(const results::AccuracyRun& run,
                                       const results::AccuracyPointRef& ref);

} // namespace kan::reports::detail
