// stoker/torch.h: batches as LibTorch tensors (target stoker::torch).
//
//   for (stoker::Batch& batch : loader.epoch(e)) {
//     auto t = stoker::to_tensors(std::move(batch));   // field name -> tensor, in field order
//     auto loss = criterion(model->forward(t["image"].to(torch::kFloat)), t["label"]);
//
// Each tensor has the field's dtype and shape [B, ...] and lives on the batch's device. A bytes
// field (stoker/batch.h) becomes two tensors: "NAME", the samples' elements back to back (flat, of
// the field's dtype: uint8 for bytes), and "NAME.offsets" (int64, B+1, counting elements): sample k
// is NAME[offsets[k] : offsets[k+1]] (split_bytes()).
// Thread-safety: like the Batch it takes; the returned tensors are ordinary tensors.
#pragma once

// torch/types.h first: ordered_dict.h uses TORCH_CHECK without including it.
#include <torch/types.h>
// (keep the order)
#include <torch/ordered_dict.h>

#include <string>
#include <vector>

#include "stoker/batch.h"

namespace stoker {

using TensorMap = torch::OrderedDict<std::string, torch::Tensor>;

// Zero-copy: the tensors ALIAS the loader's memory (a shared-memory slot on the CPU, a device
// buffer on CUDA) and keep the batch alive; its slot returns when the last of them is freed.
// Keep such tensors only as long as a batch would be kept: holding many stalls the loader (it
// reports this as an error rather than hanging). On CUDA the tensors are ready for use on torch's
// current stream for their device: that stream waits, on the device, for the batch's copy, and is
// recorded so the buffer is recycled only after the work queued there.
STOKER_API TensorMap to_tensors(Batch&& batch);

// Copies: the tensors own their memory, on the batch's device, and the batch is released at once.
// For tensors to keep (e.g. accumulate across steps).
STOKER_API TensorMap copy_to_tensors(Batch&& batch);

STOKER_API torch::Dtype torch_dtype(DType t);

// A bytes field's samples as views of `flat` (no copy): sample k is flat[offsets[k] : offsets[k+1]].
STOKER_API std::vector<torch::Tensor> split_bytes(const torch::Tensor& flat, const torch::Tensor& offsets);

}  // namespace stoker
