#include "comm/communicator.hpp"

namespace zt {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::broadcast: return "broadcast";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::barrier: return "barrier";
    case CommOp::device_wait: return "device_wait";
  }
  return "?";
}

double all_reduce_scalar(Communicator& c, double v, ReduceOp op) {
  double x = v;
  all_reduce_sync(c, Tensor(&x, DType::f64, Shape{1}), op);
  return x;
}

}  // namespace zt
