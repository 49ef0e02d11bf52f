// MKL's conditional numerical reproducibility for the whole test binary (and the kanbench
// processes its tests start). The pykan references were recorded on a CPU where MKL takes its
// compatible code path; on an AVX-512 Intel CPU it takes another, whose dot products round
// differently, and an LBFGS run on Rosenbrock's function amplifies that to a 2% difference within
// its first step (LBFGS.MatchesPykansLbfgsStepForStep: bit-identical with MKL_CBWR=COMPATIBLE, 2e-2
// off without). MKL reads the variable at its first call, after static initialisation; a value
// set by whoever runs the tests is kept.
#include <cstdlib>

namespace {
const bool kReproducibleBlas = [] { return setenv("MKL_CBWR", "COMPATIBLE", 0) == 0; }();
} // namespace
