#include "comm/communicator.hpp"

#include <algorithm>
#include <cmath>

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

CollectiveTime collective_time(const CommCounters& c, int group_size) {
  CollectiveTime t;
  for (CommOp op : {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather, CommOp::broadcast}) {
    t.seconds += c.seconds[static_cast<int>(op)];
    t.waited += c.waited[static_cast<int>(op)];
  }
  t.hidden_fraction = group_size > 1 && t.seconds > 0 ? std::clamp(1.0 - t.waited / t.seconds, 0.0, 1.0) : std::nan("");
  return t;
}

double all_reduce_scalar(Communicator& c, double v, ReduceOp op) {
  double x = v;
  all_reduce_sync(c, Tensor(&x, DType::f64, Shape{1}), op);
  return x;
}

}  // namespace zt
