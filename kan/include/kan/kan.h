#pragma once
/// The whole public API of the KAN library, except data-parallel training
/// (kan/distributed/data_parallel.h, which brings c10d's headers).

#include "kan/data/data_file.h"
#include "kan/data/dataset.h"
#include "kan/nn/bspline.h"
#include "kan/nn/layer.h"
#include "kan/nn/memory.h"
#include "kan/nn/mlp.h"
#include "kan/nn/model.h"
#include "kan/nn/network.h"
#include "kan/nn/options.h"
#include "kan/nn/torchscript_model.h"
#include "kan/optim/lbfgs.h"
#include "kan/serialize/checkpoint.h"
#include "kan/serialize/model_file.h"
#include "kan/serialize/pykan.h"
#include "kan/serialize/torch_file.h"
#include "kan/serialize/torchscript.h"
#include "kan/symbolic/expression.h"
#include "kan/symbolic/symbolic.h"
#include "kan/train/fit.h"
#include "kan/train/pipeline.h"
