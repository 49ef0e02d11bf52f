// Uses each installed library once: a KAN forward, a device audit, a result model, a file, a
// catalogue function (Boost.Math compiled into kan, no Boost here), the paper's results
// (compiled in: no data file installed) and a data-file format (which links kan's readers and
// zlib).
#include <kan/data/function_catalogue.h>
#include <kan/data/paper_results.h>
#include <kan/diagnostics/device_audit.h>
#include <kan/io/atomic_file.h>
#include <kan/kan.h>
#include <kan/results/results.h>

#include <cstdio>

int main(int argc, char** argv) {
  kan::KAN model(kan::KANOptions({2, 3, 1}).grid(4).seed(1));
  const auto y = model(torch::rand({8, 2}));
  const auto audit = kan::diagnostics::DeviceAudit(torch::kCPU).module(*model).report();
  kan::results::Results results;
  const auto sn = kan::reference_function("ellipj").f(torch::tensor({{0.5, 1.0}}, torch::kFloat64));
  const auto published = kan::paper_special_functions().size() + kan::paper_feynman().size();
  if (argc > 1)
    kan::io::write_file_atomically(argv[1], "consumer\n");
  std::printf("output %lld x %lld, %lld tensors audited, %zu cases, sn(0.5 | 1) = %.6f, %zu "
              "published rows, reads %s\n",
              static_cast<long long>(y.size(0)), static_cast<long long>(y.size(1)),
              static_cast<long long>(audit.summary.tensors_checked), results.cases.size(),
              sn.item<double>(), published, kan::to_string(kan::DataFormat::kNpz).c_str());
  return audit.findings.empty() && y.size(0) == 8 && published == 15 + 27 ? 0 : 1;
}
