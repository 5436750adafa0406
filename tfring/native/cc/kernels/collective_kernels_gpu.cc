// GPU kernels of TfringAllreduce and TfringBroadcast: the same op as on the CPU (validation,
// output allocation, the engine's order), but the engine never touches device memory: it hands
// the host collective to a PinnedStaging (cuda/pinned_staging.h), which copies the tensors down
// in pieces, overlapped with the ring, and the results back up. Built only where nvcc and a GPU
// build of TensorFlow are present (GOOGLE_CUDA); allgather and barrier keep their CPU kernels, and
// TensorFlow copies their inputs to the host.
#if GOOGLE_CUDA

#include <cuda_runtime.h>

#include <memory>

#include "../cuda/pinned_staging.h"
#include "collective_kernels.h"
#include "tensorflow/core/platform/errors.h"
#include "xla/stream_executor/stream.h"

namespace tfring {
namespace {

class GpuListCollectiveOp : public ListCollectiveOp {
 public:
  GpuListCollectiveOp(tensorflow::OpKernelConstruction* c, OpKind kind) : ListCollectiveOp(c, kind) {}

 protected:
  bool prepare(tensorflow::OpKernelContext* ctx, const Runtime& runtime, Request* req) override {
    auto* stream = ctx->op_device_context() ? ctx->op_device_context()->stream() : nullptr;
    if (stream == nullptr) {
      ctx->SetStatus(tensorflow::errors::Internal("tfring: GPU kernel ", name(), " has no stream"));
      return false;
    }
    auto producer = static_cast<cudaStream_t>(stream->platform_specific_handle().stream);
    std::vector<cuda::DeviceTensor> device;
    int deviceId = -1;
    for (auto& t : req->tensors) {
      device.push_back({t.in, t.out, t.bytes});
      if (deviceId < 0 && t.bytes > 0) {
        cudaPointerAttributes attributes;
        if (cudaPointerGetAttributes(&attributes, t.in) == cudaSuccess) deviceId = attributes.device;
      }
      t.in = nullptr;  // the engine must not read device memory
      t.out = nullptr;
    }
    const size_t elementBytes = dataTypeSize(req->type);
    const double timeout = runtime.config().collectiveTimeout;
    // Runs on the engine thread, which runs one collective at a time: staging_ is never shared.
    req->staged = [this, device = std::move(device), deviceId, elementBytes, producer,
                   timeout](const HostCollective& collective) {
      if (!staging_ || (deviceId >= 0 && stagingDevice_ != deviceId)) {
        staging_ = std::make_unique<cuda::PinnedStaging>(cuda::PinnedStaging::kDefaultPieceBytes, deviceId);
        stagingDevice_ = deviceId;
      }
      staging_->run(device, elementBytes, producer, collective, Deadline::after(timeout));
    };
    return true;
  }

 private:
  std::unique_ptr<cuda::PinnedStaging> staging_;
  int stagingDevice_ = -1;
};

class GpuAllreduceOp : public GpuListCollectiveOp {
 public:
  explicit GpuAllreduceOp(tensorflow::OpKernelConstruction* c) : GpuListCollectiveOp(c, OpKind::kAllreduce) {}
};

class GpuBroadcastOp : public GpuListCollectiveOp {
 public:
  explicit GpuBroadcastOp(tensorflow::OpKernelConstruction* c) : GpuListCollectiveOp(c, OpKind::kBroadcast) {}
};

REGISTER_KERNEL_BUILDER(Name("TfringAllreduce").Device(tensorflow::DEVICE_GPU), GpuAllreduceOp);
REGISTER_KERNEL_BUILDER(Name("TfringBroadcast").Device(tensorflow::DEVICE_GPU), GpuBroadcastOp);

}  // namespace
}  // namespace tfring

#endif  // GOOGLE_CUDA
