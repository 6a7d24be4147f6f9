#pragma once
// Which parameter each optimizer state belongs to.
//
// torch.optim.Optimizer.state_dict() keys its state by integer ids: {"state": {0: {"step", "exp_avg", ...}},
// "param_groups": [{..., "params": [0, 1, ...]}]}, where the ids count the parameters in the order the
// optimizer was given them, usually model.parameters(). Newer torch adds "param_names" to each group when the
// optimizer was built from named parameters; then the names are exact. Otherwise the same file's model state
// dict gives the order: its entries are in state_dict() order, whose parameters come in model.parameters()
// order, interleaved with buffers (running_mean, num_batches_tracked, ...) and with tied parameters listed
// twice. Buffers are told apart by shape: a parameter's exp_avg/momentum has the parameter's shape, so a
// model entry whose shape does not fit the next state is skipped as a buffer. States whose shapes never
// match (SGD without momentum keeps none) stay unlabelled rather than guessed.

#include "model/entry.h"
#include "pickle/value.h"

#include <string>
#include <vector>

namespace sl::torch {

struct OptimizerLabels {
    size_t labelled = 0;
    size_t states = 0;
    std::string how; // "param_names", "the model state dict's parameter order", or empty
};

// Adds attribute "param" (and "param_source") to each optimizer entry named state.<id>.<field>.
// `optimizer` is the optimizer dict node; `model` the entries of the model state dict in the same file (may
// be empty).
OptimizerLabels labelOptimizerState(const pickle::Value* optimizer, std::vector<Entry>& entries,
    const std::vector<Entry>& model);

} // namespace sl::torch
