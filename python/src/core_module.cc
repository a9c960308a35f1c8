// kolo._core: the native half of the kolo Python package. It exposes the
// process's Client (process_client.h) to Python on buffers: the Python half
// (kolo/_api.py, kolo/_shared.py) checks arrays, names collectives, keeps the
// memory of a pending collective alive and turns the status codes raised
// here into the KoloError hierarchy.
//
// Every call that can block (submission and every wait) releases the GIL;
// the caller keeps the buffers alive until the collective's wait returns.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/membership.h"
#include "common/scatter_rows.h"
#include "kolo/kolo.h"
#include "proto/kolo/abi/collective_traits.h"
#include "proto/kolo/abi/types.h"
#include "python/src/process_client.h"

#ifdef KOLO_BUILT_WITH_NCCL
#include <nccl.h>  // NCCL_VERSION_CODE only: _core links no NCCL
#endif

namespace py = pybind11;

namespace kolo::python {
namespace {

// A failed status on its way to Python: the translator registered below
// raises kolo.errors.error_for(code, message).
struct StatusError {
  int code;
  std::string message;
};

void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw StatusError{static_cast<int>(s.code()), std::string(s.message())};
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  ThrowIfError(v.status());
  return *std::move(v);
}

std::shared_ptr<Client> ClientOrThrow() { return ValueOrThrow(GetProcessClient()); }

std::vector<int64_t> ShapeOf(const py::buffer_info& info) {
  return std::vector<int64_t>(info.shape.begin(), info.shape.end());
}

// A C-contiguous view of `buf`; the Python half passes only such arrays.
py::buffer_info Request(const py::buffer& buf, bool writable) {
  py::buffer_info info = buf.request(writable);
  ssize_t expect = info.itemsize;
  for (ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expect) {
      throw StatusError{static_cast<int>(absl::StatusCode::kInvalidArgument),
                        "tensor is not C-contiguous"};
    }
    expect *= info.shape[d];
  }
  return info;
}

ConstTensorView InView(const py::buffer& buf, int dtype) {
  py::buffer_info info = Request(buf, false);
  return ConstTensorView(info.ptr, ValueOrThrow(ToDType(dtype)), ShapeOf(info));
}

TensorView OutView(const py::buffer& buf, int dtype) {
  py::buffer_info info = Request(buf, true);
  return TensorView{info.ptr, ValueOrThrow(ToDType(dtype)), ShapeOf(info)};
}

AllreduceOptions ReduceOptions(int op, double prescale, double postscale, int compression,
                               int process_set) {
  return AllreduceOptions{.op = ValueOrThrow(ToReduceOp(op)),
                          .prescale = prescale,
                          .postscale = postscale,
                          .compression = ValueOrThrow(ToCompression(compression)),
                          .process_set = process_set};
}

// A collective's result copied out of the session's shared memory (without
// the GIL, so into plain memory first).
struct ResultCopy {
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;
  std::vector<char> bytes;

  static void* Sink(void* self, const int64_t* shape, int ndim, const int64_t* splits,
                    int nsplits) {
    auto* r = static_cast<ResultCopy*>(self);
    r->shape.assign(shape, shape + ndim);
    r->splits.assign(splits, splits + nsplits);
    size_t n = 1;
    for (int64_t d : r->shape) n *= static_cast<size_t>(d);
    r->bytes.resize(n * 8 + 1);  // generous: the element size is not known here
    return r->bytes.data();
  }

  // The bytes and shape; kolo/_api.py makes the array. (Building it here
  // with pybind11's NumPy API would tie the extension to the NumPy ABI its
  // pybind11 knows: Debian's 2.10 misreads NumPy 2's dtype layout.)
  py::tuple ToPython(size_t itemsize) const {
    size_t n = itemsize;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return py::make_tuple(py::bytes(bytes.data(), std::min(n, bytes.size())), shape);
  }
};

ResultCopy WaitAndCopy(uint64_t h, bool alltoall) {
  ResultCopy res;
  char err[2048] = {0};
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = PyApiTable()->wait_output(h, alltoall ? 1 : 0, &ResultCopy::Sink, &res, err, sizeof(err));
  }
  if (rc != 0) throw StatusError{rc, err};
  return res;
}

// A collective's result copied once, straight from the session's shared
// memory into a buffer the caller's `alloc(shape)` returns (a framework
// tensor's memory): the sink runs on the waiting thread, which takes the GIL
// back only to call `alloc`.
struct ResultInto {
  py::function alloc;
  size_t itemsize = 0;
  py::object buffer;  // keeps the destination alive until the copy is done
  std::vector<int64_t> splits;
  std::string error;

  static void* Sink(void* self, const int64_t* shape, int ndim, const int64_t* splits,
                    int nsplits) {
    auto* r = static_cast<ResultInto*>(self);
    r->splits.assign(splits, splits + nsplits);
    py::gil_scoped_acquire gil;
    try {
      std::vector<int64_t> dims(shape, shape + ndim);
      r->buffer = r->alloc(dims);
      py::buffer_info info = Request(py::reinterpret_borrow<py::buffer>(r->buffer), true);
      size_t want = r->itemsize;
      for (int64_t d : dims) want *= static_cast<size_t>(d);
      if (static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize) != want) {
        r->error = "the buffer for the collective's output has the wrong size";
        return nullptr;
      }
      // A zero-element result: any non-null address, nothing is copied.
      return info.ptr != nullptr ? info.ptr : static_cast<void*>(r);
    } catch (const py::error_already_set& e) {
      r->error = e.what();
    } catch (const StatusError& e) {
      r->error = e.message;
    }
    return nullptr;
  }
};

std::vector<uint64_t> Ids(const std::vector<Handle>& hs) {
  std::vector<uint64_t> ids;
  for (const Handle& h : hs) ids.push_back(h.id);
  return ids;
}

// A tensor in the session's shared-memory arena (Client::Allocate), seen by
// Python through the buffer protocol: a NumPy array or framework tensor over
// it keeps it alive, and collectives on it copy nothing between the process
// and kolod. Its memory stays valid after kolo.shutdown() (HostBuffer keeps
// the mapping).
struct ArenaBuffer {
  HostBuffer buffer;
};

// The buffer-protocol format of a dtype's elements; bfloat16, which Python
// has no format for, is shown as int16 of the same bytes.
const char* BufferFormat(DType t) {
  switch (t) {
    case DType::kUint8:
      return "B";
    case DType::kInt8:
      return "b";
    case DType::kInt16:
    case DType::kBFloat16:
      return "h";
    case DType::kInt32:
      return "i";
    case DType::kInt64:
      return "q";
    case DType::kFloat16:
      return "e";
    case DType::kFloat32:
      return "f";
    case DType::kFloat64:
      return "d";
    case DType::kBool:
      return "?";
    case DType::kUint16:
      return "H";
  }
  return "B";
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Kolo's native client: the process's attachment to kolod.";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object err = py::module_::import("kolo.errors").attr("error_for")(e.code, e.message);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    }
  });

  py::class_<ArenaBuffer>(m, "ArenaBuffer", py::buffer_protocol()).def_buffer([](ArenaBuffer& b) {
    const HostBuffer& h = b.buffer;
    const auto itemsize = static_cast<ssize_t>(DTypeSize(h.dtype()));
    std::vector<ssize_t> shape(h.shape().begin(), h.shape().end());
    std::vector<ssize_t> strides(shape.size());
    ssize_t stride = itemsize;
    for (size_t d = shape.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= shape[d];
    }
    return py::buffer_info(h.data(), itemsize, BufferFormat(h.dtype()),
                           static_cast<ssize_t>(shape.size()), shape, strides);
  });
  // A C-contiguous tensor of `dtype` and `shape` in the session's arena.
  m.def("allocate", [](int dtype, std::vector<int64_t> shape) {
    auto c = ClientOrThrow();
    DType t = ValueOrThrow(ToDType(dtype));
    return ArenaBuffer{ValueOrThrow(c->Allocate(t, std::move(shape)))};
  });

  // The NCCL version code (major*10000 + minor*100 + patch) kolod's device
  // backend was built against, built in the same Bazel configuration as
  // _core; 0 where it was built without CUDA and NCCL (device tensors are
  // then refused).
#ifdef KOLO_BUILT_WITH_NCCL
  m.attr("NCCL_VERSION") = static_cast<int>(NCCL_VERSION_CODE);
#else
  m.attr("NCCL_VERSION") = 0;
#endif

  m.def("init", [] {
    py::gil_scoped_release nogil;
    ThrowIfError(InitProcessClient());
  });
  m.def("shutdown", [] {
    py::gil_scoped_release nogil;
    ShutdownProcessClient();
  });
  m.def("is_initialized", [] { return GetProcessClient().ok(); });
  // Elastic jobs (one node): kolo.elastic's reset and commit checks.
  m.def("elastic_reset", [] {
    py::gil_scoped_release nogil;
    ThrowIfError(ResetProcessClient());
  });
  m.def("epoch", [] { return ClientOrThrow()->epoch(); });
  // (this session's epoch, the job's current epoch, ranks waiting to join)
  m.def("elastic_status", [] {
    auto c = ClientOrThrow();
    Client::ElasticStatus s;
    {
      py::gil_scoped_release nogil;
      s = ValueOrThrow(c->GetElasticStatus());
    }
    return py::make_tuple(s.epoch, s.current_epoch, s.joiners_waiting);
  });
  m.attr("MEMBERSHIP_CHANGED_PREFIX") = kMembershipChangedPrefix;
  m.def("rank", [] { return ClientOrThrow()->rank(); });
  m.def("size", [] { return ClientOrThrow()->size(); });
  m.def("local_rank", [] { return ClientOrThrow()->local_rank(); });
  m.def("local_size", [] { return ClientOrThrow()->local_size(); });
  m.def("process_set_rank",
        [](int ps) { return ValueOrThrow(ClientOrThrow()->ProcessSetRank(ps)); });
  m.def("process_set_size",
        [](int ps) { return ValueOrThrow(ClientOrThrow()->ProcessSetSize(ps)); });
  m.def("add_process_set", [](std::vector<int> ranks) {
    auto c = ClientOrThrow();
    py::gil_scoped_release nogil;
    return ValueOrThrow(c->AddProcessSet(std::move(ranks)));
  });
  m.def("remove_process_set", [](int ps) {
    auto c = ClientOrThrow();
    py::gil_scoped_release nogil;
    ThrowIfError(c->RemoveProcessSet(ps));
  });

  m.def("allreduce_async",
        [](py::buffer input, py::buffer output, int dtype, const std::string& name, int op,
           double prescale, double postscale, int compression, int ps) {
          auto c = ClientOrThrow();
          ConstTensorView in = InView(input, dtype);
          TensorView out = OutView(output, dtype);
          AllreduceOptions o = ReduceOptions(op, prescale, postscale, compression, ps);
          py::gil_scoped_release nogil;
          return ValueOrThrow(c->AllreduceAsync(in, out, name, o)).id;
        });
  m.def("grouped_allreduce_async",
        [](std::vector<py::buffer> inputs, std::vector<py::buffer> outputs, std::vector<int> dtypes,
           std::vector<std::string> names, int op, double prescale, double postscale,
           int compression, int ps) {
          auto c = ClientOrThrow();
          std::vector<ConstTensorView> ins;
          std::vector<TensorView> outs;
          for (size_t i = 0; i < inputs.size() && i < outputs.size() && i < dtypes.size(); ++i) {
            ins.push_back(InView(inputs[i], dtypes[i]));
            outs.push_back(OutView(outputs[i], dtypes[i]));
          }
          AllreduceOptions o = ReduceOptions(op, prescale, postscale, compression, ps);
          py::gil_scoped_release nogil;
          return Ids(ValueOrThrow(c->GroupedAllreduceAsync(ins, outs, names, o)));
        });
  m.def("broadcast_async",
        [](py::buffer tensor, int dtype, const std::string& name, int root, int ps) {
          auto c = ClientOrThrow();
          TensorView t = OutView(tensor, dtype);
          py::gil_scoped_release nogil;
          return ValueOrThrow(c->BroadcastAsync(t, name, root, {.process_set = ps})).id;
        });
  // CUDA arrays (kolo/_api.py reads their __cuda_array_interface__): a
  // device pointer, updated in place; `stream` is the producer's
  // cudaStream_t as an integer (0: the legacy default stream).
  m.def("allreduce_device_async", [](uintptr_t data, std::vector<int64_t> shape, int dtype,
                                     int device, uintptr_t stream, const std::string& name, int op,
                                     double prescale, double postscale, int compression, int ps) {
    auto c = ClientOrThrow();
    auto* p = reinterpret_cast<void*>(data);
    const auto t = static_cast<DType>(dtype);
    AllreduceOptions o = ReduceOptions(op, prescale, postscale, compression, ps);
    o.cuda_stream = reinterpret_cast<void*>(stream);
    py::gil_scoped_release nogil;
    return ValueOrThrow(c->AllreduceAsync(ConstTensorView(p, t, shape, device),
                                          TensorView{p, t, shape, device}, name, o))
        .id;
  });
  // Several CUDA arrays of one GPU, negotiated and fused as one unit, each
  // reduced in place; one producer stream for all.
  m.def("grouped_allreduce_device_async",
        [](std::vector<uintptr_t> datas, std::vector<std::vector<int64_t>> shapes,
           std::vector<int> dtypes, int device, uintptr_t stream, std::vector<std::string> names,
           int op, double prescale, double postscale, int compression, int ps) {
          if (datas.size() != shapes.size() || datas.size() != dtypes.size()) {
            throw py::value_error(
                "grouped device allreduce: pointers, shapes and dtypes differ "
                "in length");
          }
          auto c = ClientOrThrow();
          std::vector<ConstTensorView> ins;
          std::vector<TensorView> outs;
          for (size_t i = 0; i < datas.size(); ++i) {
            auto* p = reinterpret_cast<void*>(datas[i]);
            const auto t = static_cast<DType>(dtypes[i]);
            ins.emplace_back(p, t, shapes[i], device);
            outs.push_back(TensorView{p, t, shapes[i], device});
          }
          AllreduceOptions o = ReduceOptions(op, prescale, postscale, compression, ps);
          o.cuda_stream = reinterpret_cast<void*>(stream);
          py::gil_scoped_release nogil;
          return Ids(ValueOrThrow(c->GroupedAllreduceAsync(ins, outs, names, o)));
        });
  // Device allgather and reducescatter into a caller-allocated output on the
  // input's GPU (its size: every rank's rows, or this rank's share).
  m.def("allgather_device_async", [](uintptr_t in, std::vector<int64_t> in_shape, uintptr_t out,
                                     std::vector<int64_t> out_shape, int dtype, int device,
                                     uintptr_t stream, const std::string& name, int ps) {
    auto c = ClientOrThrow();
    const auto t = static_cast<DType>(dtype);
    ConstTensorView input(reinterpret_cast<void*>(in), t, std::move(in_shape), device);
    TensorView output{reinterpret_cast<void*>(out), t, std::move(out_shape), device};
    CollectiveOptions o{.process_set = ps, .cuda_stream = reinterpret_cast<void*>(stream)};
    py::gil_scoped_release nogil;
    return ValueOrThrow(c->AllgatherAsync(input, output, name, o)).id;
  });
  m.def("reducescatter_device_async",
        [](uintptr_t in, std::vector<int64_t> in_shape, uintptr_t out,
           std::vector<int64_t> out_shape, int dtype, int device, uintptr_t stream,
           const std::string& name, int op, double prescale, double postscale, int ps) {
          auto c = ClientOrThrow();
          const auto t = static_cast<DType>(dtype);
          ConstTensorView input(reinterpret_cast<void*>(in), t, std::move(in_shape), device);
          TensorView output{reinterpret_cast<void*>(out), t, std::move(out_shape), device};
          AllreduceOptions o = ReduceOptions(op, prescale, postscale, 0, ps);
          o.cuda_stream = reinterpret_cast<void*>(stream);
          py::gil_scoped_release nogil;
          return ValueOrThrow(c->ReducescatterAsync(input, output, name, o)).id;
        });
  // Rows of a reducescatter's result at position i of n (common/scatter_rows.h).
  m.def("scatter_rows", [](int64_t total, int64_t n, int64_t i) {
    if (n <= 0 || i < 0 || i >= n || total < 0)
      throw py::value_error("scatter_rows: bad arguments");
    return ScatterRows(total, n, i);
  });
  m.def("broadcast_device_async",
        [](uintptr_t data, std::vector<int64_t> shape, int dtype, int device, uintptr_t stream,
           const std::string& name, int root, int ps) {
          auto c = ClientOrThrow();
          TensorView t{reinterpret_cast<void*>(data), static_cast<DType>(dtype), std::move(shape),
                       device};
          CollectiveOptions o{.process_set = ps, .cuda_stream = reinterpret_cast<void*>(stream)};
          py::gil_scoped_release nogil;
          return ValueOrThrow(c->BroadcastAsync(t, name, root, o)).id;
        });
  m.def("allgather_async", [](py::buffer input, int dtype, const std::string& name, int ps) {
    auto c = ClientOrThrow();
    ConstTensorView in = InView(input, dtype);
    py::gil_scoped_release nogil;
    return ValueOrThrow(c->AllgatherAsync(in, name, {.process_set = ps})).id;
  });
  m.def("grouped_allgather_async", [](std::vector<py::buffer> inputs, std::vector<int> dtypes,
                                      std::vector<std::string> names, int ps) {
    auto c = ClientOrThrow();
    std::vector<ConstTensorView> ins;
    for (size_t i = 0; i < inputs.size() && i < dtypes.size(); ++i) {
      ins.push_back(InView(inputs[i], dtypes[i]));
    }
    py::gil_scoped_release nogil;
    return Ids(ValueOrThrow(c->GroupedAllgatherAsync(ins, names, {.process_set = ps})));
  });
  m.def("reducescatter_async", [](py::buffer input, int dtype, const std::string& name, int op,
                                  double prescale, double postscale, int ps) {
    auto c = ClientOrThrow();
    ConstTensorView in = InView(input, dtype);
    AllreduceOptions o = ReduceOptions(op, prescale, postscale, 0, ps);
    py::gil_scoped_release nogil;
    return ValueOrThrow(c->ReducescatterAsync(in, name, o)).id;
  });
  m.def("grouped_reducescatter_async",
        [](std::vector<py::buffer> inputs, std::vector<int> dtypes, std::vector<std::string> names,
           int op, double prescale, double postscale, int ps) {
          auto c = ClientOrThrow();
          std::vector<ConstTensorView> ins;
          for (size_t i = 0; i < inputs.size() && i < dtypes.size(); ++i) {
            ins.push_back(InView(inputs[i], dtypes[i]));
          }
          AllreduceOptions o = ReduceOptions(op, prescale, postscale, 0, ps);
          py::gil_scoped_release nogil;
          return Ids(ValueOrThrow(c->GroupedReducescatterAsync(ins, names, o)));
        });
  m.def("alltoall_async", [](py::buffer input, int dtype, std::vector<int64_t> splits,
                             const std::string& name, int ps) {
    auto c = ClientOrThrow();
    ConstTensorView in = InView(input, dtype);
    py::gil_scoped_release nogil;
    return ValueOrThrow(c->AlltoallAsync(in, std::move(splits), name, {.process_set = ps})).id;
  });

  m.def("wait", [](uint64_t h) {
    auto c = ClientOrThrow();
    py::gil_scoped_release nogil;
    ThrowIfError(c->Wait(Handle{h}));
  });
  // Both copy the result out through the table's wait_output, the path the
  // TensorFlow ops take too.
  // Return (bytes, shape) and (bytes, shape, received_splits).
  m.def("wait_output",
        [](uint64_t h, size_t itemsize) { return WaitAndCopy(h, false).ToPython(itemsize); });
  m.def("wait_alltoall", [](uint64_t h, size_t itemsize) {
    ResultCopy res = WaitAndCopy(h, true);
    py::tuple t = res.ToPython(itemsize);
    return py::make_tuple(t[0], t[1], res.splits);
  });
  // Waits for an allgather/reducescatter (alltoall = false) or alltoall
  // handle and copies its result once into alloc(shape), a writable
  // C-contiguous buffer of `itemsize`-byte elements; returns the rows
  // received from each rank (alltoall) or an empty list.
  m.def("wait_output_into", [](uint64_t h, bool alltoall, size_t itemsize, py::function alloc) {
    ResultInto res;
    res.alloc = std::move(alloc);
    res.itemsize = itemsize;
    char err[2048] = {0};
    int rc;
    {
      py::gil_scoped_release nogil;
      rc =
          PyApiTable()->wait_output(h, alltoall ? 1 : 0, &ResultInto::Sink, &res, err, sizeof(err));
    }
    if (!res.error.empty()) {
      throw StatusError{static_cast<int>(absl::StatusCode::kInvalidArgument), res.error};
    }
    if (rc != 0) throw StatusError{rc, err};
    return res.splits;
  });
  // True once complete (a later wait returns at once); the handle stays valid.
  m.def("test", [](uint64_t h) {
    auto c = ClientOrThrow();
    py::gil_scoped_release nogil;
    return ValueOrThrow(c->Test(Handle{h}));
  });
  // This rank will not take part in collective `kind` named `name`: a
  // check of the Python layer failed with `message`. The other ranks'
  // collective fails with it instead of waiting (Client::Refuse).
  m.def("refuse", [](int kind, const std::string& name, int ps, const std::string& message) {
    char err[512] = {0};
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = PyApiTable()->refuse(kind, name.c_str(), ps, message.c_str(), err, sizeof(err));
    }
    if (rc != 0) throw StatusError{rc, err};
  });
  m.def("barrier", [](int ps) {
    auto c = ClientOrThrow();
    py::gil_scoped_release nogil;
    ThrowIfError(c->Barrier({.process_set = ps}));
  });
  m.def("join", [] {
    auto c = ClientOrThrow();
    py::gil_scoped_release nogil;
    return ValueOrThrow(c->Join());
  });
  // The job's timeline on this node (kolo/_topology.py writes the file).
  m.def("timeline_start", [](uint64_t max_events) {
    auto c = ClientOrThrow();
    py::gil_scoped_release nogil;
    ThrowIfError(c->StartTimeline(max_events));
  });
  // (trace JSON, events, dropped). Tensor names are the caller's bytes: any
  // that are not UTF-8 come back with U+FFFD, so the JSON stays valid.
  m.def("timeline_stop", [] {
    auto c = ClientOrThrow();
    absl::StatusOr<TimelineTrace> trace;
    {
      py::gil_scoped_release nogil;
      trace = c->StopTimeline();
    }
    ThrowIfError(trace.status());
    PyObject* json = PyUnicode_DecodeUTF8(trace->json.data(),
                                          static_cast<Py_ssize_t>(trace->json.size()), "replace");
    if (json == nullptr) throw py::error_already_set();
    return py::make_tuple(py::reinterpret_steal<py::str>(json), trace->events, trace->dropped);
  });
  // The address of the KoloPyApi table for the TensorFlow op library.
  m.def("_api_table", [] { return reinterpret_cast<uintptr_t>(PyApiTable()); });
  m.attr("API_VERSION") = KOLO_PY_API_VERSION;

  // The codes of proto/kolo/abi/types.h, by name, in code order: the
  // Python half maps NumPy, torch and TensorFlow dtypes to these names and
  // never writes a code itself.
  py::dict dtypes;
  for (uint32_t code = 0; code < kNumDTypes; ++code) {
    dtypes[py::str(DTypeName(static_cast<DType>(code)))] = code;
  }
  m.attr("DTYPES") = dtypes;
  py::dict kinds;
  for (uint32_t code = 1; code <= kMaxCollectiveKind; ++code) {
    kinds[py::str(CollectiveKindName(static_cast<CollectiveKind>(code)))] = code;
  }
  m.attr("KINDS") = kinds;
  py::dict ops;
  for (uint32_t code = 0; code < kNumReduceOps; ++code) {
    ops[py::str(ReduceOpName(static_cast<ReduceOp>(code)))] = code;
  }
  m.attr("REDUCE_OPS") = ops;
}

}  // namespace kolo::python
