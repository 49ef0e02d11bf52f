#pragma once
/// results.json in and out: strict, kind reading (one ResultsError naming file, key path and
/// problem; never a half-built object) and atomic writing.

#include "kan/io/json_reader.h"
#include "kan/results/environment.h"
#include "kan/results/results.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace kan::results {

/// A results (or other input) file that cannot be read: what() is "FILE: KEY.PATH: PROBLEM",
/// e.g. "run/results.json: cases[3].median_epoch_seconds: expected a number, got a string
/// (\"fast\")". The one error of every strict document reader (kan/io/json_reader.h).
using ResultsError = io::JsonError;

/// The JSON form of a whole results.json (SCHEMA.md).
nlohmann::json to_json(const Results& results);
/// Reads a results document. `source` names it in error messages (a file name).
/// Throws ResultsError: missing key, wrong type, bad value (a negative time, count, size or
/// rate, a fraction outside 0..1), unknown key (tolerated only when the file's minor version is
/// newer than kSchemaVersion), another major version, a case `ok` without numbers or `skipped`
/// with one, a median, IQR, min, max or rate that is not that of its epoch_seconds
/// (fill_epoch_statistics(), relative tolerance 1e-9), a missing or malformed run_id (schema
/// 1.1 on), a comparison naming a case that is not there.
Results results_from_json(const nlohmann::json& json, const std::string& source = "");

/// The one JSON form of a finding (SCHEMA.md, `audit_findings[j]`): results.json, audit.json and
/// fit.json all write findings this way.
nlohmann::json to_json(const AuditFinding& finding);
/// Throws ResultsError, with key paths inside the finding.
AuditFinding audit_finding_from_json(const nlohmann::json& json, const std::string& source = "");

/// The JSON forms of the environment (results.json `environment`, `kanbench env --json`).
nlohmann::json to_json(const Environment& environment);
/// Throws ResultsError, with key paths below `environment`.
Environment environment_from_json(const nlohmann::json& json, const std::string& source = "");

/// Reads and parses a results.json. Throws ResultsError (cannot open, not JSON, invalid).
///
/// Example:
///   try {
///     auto results = kan::results::read_results_file("run/results.json");
///   } catch (const kan::results::ResultsError& e) {
///     std::cerr << e.what() << "\n"; // names the file, the key path and the problem
///   }
Results read_results_file(const std::string& path);

/// Reads and parses a JSON file. Throws ResultsError naming the file when it is a folder
/// ("is a folder, expected " + `what`), cannot be opened or is not JSON.
nlohmann::json read_json_file(const std::string& path, const std::string& what = "a JSON file");

/// Checks `results` by reading its JSON back, then writes it to `path` atomically (2-space
/// indent, final newline). Throws ResultsError when the results would not read back (e.g. an
/// `ok` case without a median, a NaN in epoch_seconds, an empty run_id), std::runtime_error
/// when the file cannot be written; in both cases `path` is left as it was.
void write_results_file(const std::string& path, const Results& results);

/// The whole content of a file; throws std::runtime_error naming the file when it cannot be read.
std::string read_text_file(const std::string& path);

} // namespace kan::results
