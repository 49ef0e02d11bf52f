#pragma once
/// The whole public API of the KAN library, except data-parallel training (kan/data_parallel.h,
/// which brings c10d's headers).

#include "kan/bspline.h"
#include "kan/checkpoint.h"
#include "kan/data_file.h"
#include "kan/dataset.h"
#include "kan/expression.h"
#include "kan/fit.h"
#include "kan/layer.h"
#include "kan/lbfgs.h"
#include "kan/memory.h"
#include "kan/mlp.h"
#include "kan/model.h"
#include "kan/network.h"
#include "kan/options.h"
#include "kan/pipeline.h"
#include "kan/pykan.h"
#include "kan/symbolic.h"
#include "kan/torch_file.h"
