#include "kan/results/gbench.h"

#include "kan/results/results_io.h"

#include "kan/io/json_reader.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

namespace kan::results {

using json = nlohmann::json;
using io::ObjectReader;

double time_unit_seconds(const std::string& unit) {
  if (unit == "ns")
    return 1e-9;
  if (unit == "us")
    return 1e-6;
  if (unit == "ms")
    return 1e-3;
  if (unit == "s")
    return 1;
  throw std::invalid_argument("unknown Google Benchmark time unit \"" + unit +
                              "\" (expected ns, us, ms or s)");
}

std::optional<double> GBenchRun::real_seconds() const {
  if (!real_time || aggregate_unit == "percentage")
    return std::nullopt;
  return *real_time * time_unit_seconds(time_unit);
}

std::optional<double> GBenchRun::cpu_seconds() const {
  if (!cpu_time || aggregate_unit == "percentage")
    return std::nullopt;
  return *cpu_time * time_unit_seconds(time_unit);
}

namespace {

// A number that Google Benchmark may also have written as NaN / Infinity (null after
// sanitising).
std::optional<double> gbench_number(ObjectReader& r, const std::string& key) {
  const auto* value = r.optional(key);
  if (!value) {
    // A key that is there but null stands for NaN / Infinity.
    return std::nullopt;
  }
  if (!value->is_number())
    io::fail(r.path_of(key), "expected a number, got " + io::describe(*value));
  return value->get<double>();
}

GBenchContext context_from_json(const json& value, const std::string& path) {
  ObjectReader r(value, path, true);
  GBenchContext c;
  c.date = r.optional_string("date").value_or("");
  c.host_name = r.optional_string("host_name").value_or("");
  c.executable = r.optional_string("executable").value_or("");
  c.library_build_type = r.optional_string("library_build_type").value_or("");
  c.library_version = r.optional_string("library_version").value_or("");
  c.num_cpus = r.optional_integer("num_cpus");
  c.mhz_per_cpu = gbench_number(r, "mhz_per_cpu");
  c.cpu_scaling_enabled = r.optional_bool("cpu_scaling_enabled");
  if (const auto* load = r.optional("load_avg")) {
    const auto& array = io::as_array(*load, r.path_of("load_avg"));
    for (size_t i = 0; i < array.size(); ++i)
      c.load_avg.push_back(array[i].is_null()
                               ? std::numeric_limits<double>::quiet_NaN()
                               : io::as_number(array[i], io::index_path(r.path_of("load_avg"), i)));
  }
  return c;
}

GBenchRun run_from_json(const json& value, const std::string& path) {
  ObjectReader r(value, path, true);
  GBenchRun b;
  b.name = r.string("name");
  b.run_name = r.optional_string("run_name").value_or(b.name);
  b.run_type = r.optional_string("run_type").value_or("iteration");
  b.aggregate_name = r.optional_string("aggregate_name").value_or("");
  b.aggregate_unit =
      r.optional_string("aggregate_unit").value_or(b.run_type == "aggregate" ? "time" : "");
  b.label = r.optional_string("label").value_or("");
  b.error_occurred = r.optional_bool("error_occurred").value_or(false);
  b.error_message = r.optional_string("error_message").value_or("");
  b.iterations = r.optional_integer("iterations");
  b.repetitions = r.optional_integer("repetitions");
  b.repetition_index = r.optional_integer("repetition_index");
  b.threads = r.optional_integer("threads");
  b.real_time = gbench_number(r, "real_time");
  b.cpu_time = gbench_number(r, "cpu_time");
  b.time_unit = r.optional_string("time_unit").value_or("ns");
  try {
    time_unit_seconds(b.time_unit);
  } catch (const std::invalid_argument& e) {
    io::fail(r.path_of("time_unit"), e.what());
  }
  // Keys Google Benchmark writes that are not counters.
  for (const char* key : {"family_index", "per_family_instance_index", "big_o", "rms",
                          "cpu_coefficient", "real_coefficient"})
    r.optional(key);
  for (const auto& item : value.items()) {
    static const std::set<std::string> kNotCounters{"name",
                                                    "run_name",
                                                    "run_type",
                                                    "aggregate_name",
                                                    "aggregate_unit",
                                                    "label",
                                                    "error_occurred",
                                                    "error_message",
                                                    "iterations",
                                                    "repetitions",
                                                    "repetition_index",
                                                    "threads",
                                                    "real_time",
                                                    "cpu_time",
                                                    "time_unit",
                                                    "family_index",
                                                    "per_family_instance_index",
                                                    "big_o",
                                                    "rms",
                                                    "cpu_coefficient",
                                                    "real_coefficient"};
    if (kNotCounters.count(item.key()))
      continue;
    if (item.value().is_number())
      b.counters[item.key()] = item.value().get<double>();
    else if (item.value().is_null())
      b.counters[item.key()] = std::numeric_limits<double>::quiet_NaN();
  }
  return b;
}

// Google Benchmark writes NaN, -NaN, Infinity and -Infinity as bare words; JSON has none of
// them. Outside strings, replace them by null.
std::string sanitise(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (const char* word :
         {"-Infinity", "Infinity", "-NaN", "NaN", "-nan", "nan", "-inf", "inf"}) {
      const size_t length = std::char_traits<char>::length(word);
      if (text.compare(i, length, word) == 0) {
        out += "null";
        i += length - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced)
      out += c;
  }
  return out;
}

} // namespace

GBenchReport gbench_from_json(const json& value, const std::string& source) {
  try {
    ObjectReader r(value, "", true);
    GBenchReport report;
    report.source = source;
    const auto& benchmarks = r.required("benchmarks");
    if (const auto* context = r.optional("context"))
      report.context = context_from_json(*context, "context");
    const auto& array = io::as_array(benchmarks, "benchmarks");
    for (size_t i = 0; i < array.size(); ++i)
      report.benchmarks.push_back(run_from_json(array[i], io::index_path("benchmarks", i)));
    return report;
  } catch (const ResultsError& e) {
    if (e.key_path().empty() && !value.is_object())
      throw ResultsError(source, "",
                         "expected a Google Benchmark JSON object (--benchmark_out), got " +
                             io::describe(value));
    throw e.in_file(source);
  }
}

GBenchReport gbench_from_text(const std::string& text, const std::string& source) {
  try {
    // A user counter named like a built-in field ("iterations") repeats that key in Google
    // Benchmark's output; the last one counts, as in Google Benchmark's own tools.
    return gbench_from_json(io::parse_json(sanitise(text), /*allow_duplicate_keys=*/true), source);
  } catch (const ResultsError& e) {
    throw e.in_file(source);
  }
}

GBenchReport read_gbench_file(const std::string& path) {
  if (std::filesystem::is_directory(path))
    throw ResultsError(path, "", "is a folder, expected a --benchmark_out JSON file");
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    throw ResultsError(path, "", what.substr(std::min(what.size(), path.size() + 2)));
  }
  return gbench_from_text(text, path);
}

} // namespace kan::results
