#pragma once
// curve2coef in pieces (kan::curve2coef_chunks): the driver that curve2coef, the layer's grid
// update and its refinement share. The caller computes the targets piece by piece (a grid update's
// spline values at the samples), so no (N, I, O) tensor has to exist at once.

#include "kan/nn/bspline.h"

#include <torch/types.h>

#include <cstdint>
#include <functional>

namespace kan::detail {

/// The targets of samples [n0, n0 + nc) and outputs [o0, o0 + oc) of every input of the piece:
/// (nc, inputs, oc), any floating dtype.
using Curve2coefTargets =
    std::function<torch::Tensor(int64_t o0, int64_t oc, int64_t n0, int64_t nc)>;
/// Receives the float64 coefficients (inputs, oc, G + k) of outputs [o0, o0 + oc).
using Curve2coefSink = std::function<void(int64_t o0, const torch::Tensor& coef)>;

/// curve2coef's least squares for the inputs of x (N, inputs) with their grid rows
/// (inputs, G + 2k + 1) and out_dim outputs, chunks.outputs outputs and chunks.samples samples at
/// a time (chunks.inputs is the caller's business). Each output piece's targets are requested
/// (for every sample piece) before its coefficients go to the sink, so a sink may overwrite what
/// the targets of that piece were computed from.
void curve2coef_pieces(const torch::Tensor& x, const torch::Tensor& grid, int64_t k,
                       int64_t out_dim, const Curve2coefChunks& chunks,
                       const Curve2coefTargets& targets, const Curve2coefSink& sink);

} // namespace kan::detail
