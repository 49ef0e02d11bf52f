#pragma once
// Command-line values checked where they are parsed: every number finite and in its range, every
// list well formed, each error one line naming the option and the value it got (CLI11 prefixes
// the option's name), so that a typo can never switch a check off or train something else.

#include "kan/nn/network.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kanbench {

/// A finite number >= min (or > min when `exclusive`), and <= max when given.
CLI::Validator finite_number(double min, bool exclusive = false,
                             double max = std::numeric_limits<double>::infinity());

/// An integer >= min (CLI11 then converts it; this catches "-1" for a count, "1e3", " 5").
CLI::Validator integer_at_least(int64_t min);

/// A decimal unsigned 64-bit integer: no sign, no wrap-around past 2^64 - 1.
CLI::Validator unsigned_64();

/// "A,B": two finite numbers >= min, such as --prune's NODE_TH,EDGE_TH (`names`, in errors),
/// handed to `set` once checked.
CLI::Option* add_number_pair_option(CLI::App* command, const std::string& name,
                                    std::function<void(double, double)> set,
                                    const std::string& names, double min, const std::string& help);

/// "2,5,1": nodes per layer, each a positive integer; with multiplication nodes as pykan writes
/// them, "2,[2,1],1" (layer 1: 2 addition and 1 multiplication node). Sets options.width (nodes
/// per layer) and options.mult; a malformed entry is an error naming `option` and the entry.
void set_width(kan::KANOptions& options, const std::string& text,
               const std::string& option = "--width");

/// "3": the arity of every multiplication node; "2,3": one per multiplication node of
/// options.width, layer by layer (set_width first). Each >= 2.
void set_mult_arity(kan::KANOptions& options, const std::string& text,
                    const std::string& option = "--mult-arity");

/// An option spelled as kan spells the enum (kan::to_string(value), found by argument-dependent
/// lookup), bound straight onto `target`: "--opt lbfgs" sets an Optimizer. Other words are
/// refused by name; the help shows the current value as the default.
template <typename Enum>
CLI::Option* add_enum_option(CLI::App* command, const std::string& name, Enum& target,
                             const std::vector<Enum>& values, const std::string& help) {
  std::vector<std::string> names;
  for (const Enum value : values)
    names.push_back(to_string(value));
  auto* option = command->add_option_function<std::string>(
      name,
      [&target, values](const std::string& text) {
        for (const Enum value : values)
          if (to_string(value) == text)
            target = value;
      },
      help);
  option->check(CLI::IsMember(names))->default_str(to_string(target));
  return option;
}

/// A value as it may appear in a message, in single quotes: kan::io::elided to 36 characters with
/// its length, so that a 1 MB argument is one short line.
std::string shown(const std::string& value);

} // namespace kanbench
