// The `sluice._sluice` extension: binds the C++ data-service client and the pipeline spec parser.
// The pure-Python package `sluice` (dataset.py, torch_dataset.py) builds the public API on it.
//
// Elements become dicts of NumPy arrays that view the element's decoded buffer (no copy): each
// array's base is a capsule holding a reference to the buffer. The arrays are writable (and
// torch.from_numpy shares them), so a tensor viewing a same-host worker's shared-memory ring, which
// is mapped read-only, is copied into an array of its own instead. String tensors become `bytes`
// (scalars) or object arrays of `bytes`. The GIL is released while waiting for data, creating and
// closing clients; a waiting next() wakes every 100 ms to let Ctrl-C through.
// Threading: a Client may be used from several Python threads; close() from one thread makes a
// next() blocked in another return None. Importing the module imports NumPy (see the module init).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "dataplane/client/data_service_client.h"
#include "dataplane/pipeline/spec_parser.h"
#include "dataplane/rpc/shm_ring.h"

namespace py = pybind11;

namespace sluice::python {
namespace {

PyObject* g_data_service_error = nullptr;  // sluice.DataServiceError (a RuntimeError)

// Raises sluice.DataServiceError carrying the status code name and message.
[[noreturn]] void RaiseServiceError(const absl::Status& status) {
  const std::string msg = absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
  PyErr_SetString(g_data_service_error, msg.c_str());
  throw py::error_already_set();
}

// Creation errors: invalid options are the caller's mistake (ValueError); the rest come from the service.
[[noreturn]] void RaiseCreateError(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument && status.message().rfind("options.", 0) == 0) {
    throw py::value_error(std::string(status.message()));
  }
  RaiseServiceError(status);
}

const char* NumpyFormat(pipeline::DType dtype) {
  switch (dtype) {
    case pipeline::DType::kBool: return "?";
    case pipeline::DType::kUInt8: return "u1";
    case pipeline::DType::kInt8: return "i1";
    case pipeline::DType::kUInt16: return "u2";
    case pipeline::DType::kInt16: return "i2";
    case pipeline::DType::kInt32: return "i4";
    case pipeline::DType::kInt64: return "i8";
    case pipeline::DType::kFloat32: return "f4";
    case pipeline::DType::kFloat64: return "f8";
    default: return nullptr;
  }
}

// A NumPy view of a numeric tensor; the capsule keeps the tensor's buffer alive.
py::object NumericArray(const pipeline::Tensor& t) {
  const char* format = NumpyFormat(t.dtype());
  if (format == nullptr) throw py::type_error(absl::StrCat("unsupported dtype ", pipeline::DTypeName(t.dtype())));
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(pipeline::DTypeSize(t.dtype()));
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<py::ssize_t>(shape[i], 1);
  }
  if (rpc::IsShmRingView(t.buffer().owner)) {
    // Read-only shared memory: a writable copy (writing into the view would fault).
    py::array copy(py::dtype(format), shape, strides);
    if (t.nbytes() > 0) std::memcpy(copy.mutable_data(), t.raw(), t.nbytes());
    return copy;
  }
  auto* owner = new std::shared_ptr<const void>(t.buffer().owner);
  py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); });
  // The element's buffer belongs to this element alone, so the view may be writable.
  void* data = const_cast<uint8_t*>(t.raw());
  if (data == nullptr) {
    static uint8_t empty_storage[64];
    data = empty_storage;  // zero-size tensor: any valid pointer
  }
  return py::array(py::dtype(format), shape, strides, data, base);
}

py::object StringValue(const pipeline::Tensor& t) {
  auto strings = t.strings();
  if (t.rank() == 0) return py::bytes(strings[0].data(), strings[0].size());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array out(py::dtype("O"), shape);
  auto** cells = static_cast<PyObject**>(out.mutable_data());
  for (size_t i = 0; i < strings.size(); ++i) {
    PyObject* b = PyBytes_FromStringAndSize(strings[i].data(), static_cast<py::ssize_t>(strings[i].size()));
    if (b == nullptr) throw py::error_already_set();
    Py_XDECREF(cells[i]);  // NumPy fills new object arrays with None
    cells[i] = b;
  }
  return out;
}

py::dict ToDict(const pipeline::Element& element) {
  py::dict d;
  for (const auto& [name, tensor] : element.fields()) {
    d[py::str(name)] = tensor.dtype() == pipeline::DType::kString ? StringValue(tensor) : NumericArray(tensor);
  }
  return d;
}

template <typename Enum>
Enum ParseChoice(const std::string& field, const std::string& value,
                 std::initializer_list<std::pair<const char*, Enum>> choices) {
  const std::string v = absl::AsciiStrToLower(value);
  std::string names;
  for (const auto& [name, e] : choices) {
    if (v == name) return e;
    absl::StrAppend(&names, names.empty() ? "" : ", ", name);
  }
  throw py::value_error(absl::StrCat(field, ": expected one of ", names, "; got '", value, "'"));
}

pipeline::PipelineDef ParseSpec(const std::string& text, const std::string& filename) {
  auto def = pipeline::ParsePipelineSpec(text, filename);
  if (!def.ok()) throw py::value_error(std::string(def.status().message()));
  return *std::move(def);
}

// Runs `fn` without the GIL and returns its result. The GIL is taken back by a plain call, not in
// a destructor as pybind11's gil_scoped_release does: while the interpreter finalizes, Python ends
// a (daemon) thread that takes the GIL with pthread_exit, and the forced unwinding through a
// destructor — noexcept — called std::terminate: a daemon thread waiting in next() when the main
// thread returned aborted the process ("terminate called without an active exception"). Through
// plain frames the unwinding passes (pybind11's dispatcher rethrows it) and the thread just ends.
template <typename Fn>
auto WithoutGil(Fn&& fn) -> decltype(fn()) {
  PyThreadState* state = PyEval_SaveThread();
  if constexpr (std::is_void_v<decltype(fn())>) {
    try {
      fn();
    } catch (...) {
      PyEval_RestoreThread(state);
      throw;
    }
    PyEval_RestoreThread(state);
  } else {
    std::optional<decltype(fn())> result;
    try {
      result.emplace(fn());
    } catch (...) {
      PyEval_RestoreThread(state);
      throw;
    }
    PyEval_RestoreThread(state);
    return *std::move(result);
  }
}

// The Python-facing client: owns a DataServiceClient until close().
class PyClient {
 public:
  PyClient(const std::string& address, std::optional<std::string> spec_text, const std::string& spec_filename,
           std::optional<std::string> spec_path, const std::string& dataset_id, const std::string& job_name,
           const std::string& sharding, int num_consumers, int consumer_index, std::optional<bool> cross_job_sharing,
           int64_t num_epochs, const std::string& compression, const std::string& target_workers,
           const std::string& client_host, const std::string& tls_ca, const std::string& tls_cert,
           const std::string& tls_key, const std::string& tls_server_name, std::optional<int> max_outstanding_requests,
           int64_t max_buffered_bytes, double heartbeat_interval_s, double create_timeout_s,
           std::optional<double> dispatcher_timeout_s, int64_t iteration) {
    client::DataServiceClientOptions o;
    o.dispatcher_address = address;
    if (spec_text) {
      o.pipeline = ParseSpec(*spec_text, spec_filename);
    } else if (spec_path) {
      auto def = pipeline::ParsePipelineSpecFile(*spec_path);
      if (!def.ok()) throw py::value_error(std::string(def.status().message()));
      o.pipeline = *std::move(def);
    }
    o.dataset_id = dataset_id;
    o.job_name = job_name;
    o.iteration = iteration;
    o.sharding = ParseChoice<service::ShardingPolicy>(
        "sharding", sharding,
        {{"off", service::SHARDING_OFF}, {"dynamic", service::SHARDING_DYNAMIC}, {"file", service::SHARDING_FILE},
         {"data", service::SHARDING_DATA}});
    o.num_consumers = num_consumers;
    o.consumer_index = consumer_index;
    o.cross_job_sharing = cross_job_sharing;
    o.num_epochs = num_epochs;
    o.compression = ParseChoice<service::Compression>(
        "compression", compression,
        {{"auto", service::COMPRESSION_AUTO}, {"none", service::COMPRESSION_NONE}, {"lz4", service::COMPRESSION_LZ4},
         {"zstd", service::COMPRESSION_ZSTD}});
    o.target_workers = ParseChoice<service::TargetWorkers>(
        "target_workers", target_workers,
        {{"auto", service::TARGET_WORKERS_AUTO}, {"any", service::TARGET_WORKERS_ANY},
         {"local", service::TARGET_WORKERS_LOCAL}});
    o.client_host = client_host;
    o.tls.ca_file = tls_ca;
    o.tls.cert_file = tls_cert;
    o.tls.key_file = tls_key;
    o.tls.server_name_override = tls_server_name;
    if (max_outstanding_requests) o.max_outstanding_requests = *max_outstanding_requests;
    o.max_buffered_bytes = max_buffered_bytes;
    o.heartbeat_interval = absl::Seconds(heartbeat_interval_s);
    o.create_timeout = absl::Seconds(create_timeout_s);
    o.dispatcher_timeout = dispatcher_timeout_s ? absl::Seconds(*dispatcher_timeout_s) : absl::InfiniteDuration();
    absl::StatusOr<std::unique_ptr<client::DataServiceClient>> created =
        WithoutGil([&] { return client::DataServiceClient::Create(std::move(o)); });
    if (!created.ok()) RaiseCreateError(created.status());
    client_ = std::shared_ptr<client::DataServiceClient>(*std::move(created));
    job_id_ = client_->job_id();
    job_client_id_ = client_->job_client_id();
    iteration_ = client_->iteration();
    dataset_id_ = client_->dataset_id();
    client_host_ = client_->client_host();
  }

  // The next element as a dict, or None at the end (also when another thread closed the client).
  py::object Next() {
    std::shared_ptr<client::DataServiceClient> c = Shared();
    // The last reference may be this one (close() ran meanwhile): destroy without the GIL.
    auto drop = [&c] { WithoutGil([&c] { c.reset(); }); };
    while (true) {
      absl::StatusOr<std::optional<pipeline::Element>> next =
          WithoutGil([&c] { return c->GetNext(absl::Milliseconds(100)); });
      if (!next.ok()) {
        if (next.status().code() == absl::StatusCode::kDeadlineExceeded) {
          if (PyErr_CheckSignals() != 0) {
            drop();
            throw py::error_already_set();
          }
          continue;
        }
        const absl::Status status = next.status();
        drop();
        if (status.code() == absl::StatusCode::kCancelled && closed()) return py::none();
        RaiseServiceError(status);
      }
      if (!next->has_value()) {
        drop();
        return py::none();
      }
      py::dict out = ToDict(**next);
      drop();
      return out;
    }
  }

  // Step markers; no-ops once closed (a step may end after its iterator finished).
  void BeginStep() {
    if (client_) client_->BeginStep();
  }
  void EndStep() {
    if (client_) client_->EndStep();
  }

  // Counters; after close(), the last values.
  py::dict Stats() {
    const client::ClientStats s = client_ ? client_->stats() : final_stats_;
    py::dict d;
    d["wait_seconds"] = s.wait_seconds_total;
    d["step_seconds"] = s.step_seconds_total;
    d["steps"] = s.steps_total;
    d["elements"] = s.elements_total;
    d["bytes"] = s.bytes_total;
    d["stall_ratio"] = s.step_seconds_total > 0 ? s.wait_seconds_total / s.step_seconds_total : 0.0;
    d["buffered_elements"] = s.buffered_elements;
    d["buffered_bytes"] = s.buffered_bytes;
    d["peak_buffered_bytes"] = s.peak_buffered_bytes;
    d["backpressure_waits"] = s.backpressure_waits;
    d["active_readers"] = s.active_readers;
    d["reconnects"] = s.reconnects;
    d["heartbeats"] = s.heartbeats_ok;
    d["heartbeat_failures"] = s.heartbeat_failures;
    d["current_round"] = s.current_round;
    d["rounds_skipped"] = s.rounds_skipped;
    d["job_finished"] = s.job_finished;
    d["ended_without_dispatcher"] = s.ended_without_dispatcher;
    py::dict received;
    for (const auto& [task_id, n] : s.elements_received_by_task) received[py::int_(task_id)] = n;
    d["elements_received_by_task"] = received;
    d["elements_lost_estimate"] = s.elements_lost_estimate;
    d["waiting"] = s.waiting_consumers;
    return d;
  }

  // Cancels the client and drops this handle; a next() running in another thread returns None.
  void Close() {
    std::shared_ptr<client::DataServiceClient> c = std::move(client_);
    if (!c) return;
    final_stats_ = c->stats();
    WithoutGil([&c] {
      c->Cancel();
      c.reset();  // destroys the client (joins threads, releases the job) unless next() still holds it
    });
  }

  bool closed() const { return client_ == nullptr; }
  int64_t job_id() const { return job_id_; }
  int64_t job_client_id() const { return job_client_id_; }
  int64_t iteration() const { return iteration_; }
  const std::string& dataset_id() const { return dataset_id_; }
  const std::string& client_host() const { return client_host_; }

 private:
  std::shared_ptr<client::DataServiceClient> Shared() {
    if (!client_) throw py::value_error("the client is closed");
    return client_;
  }
  std::shared_ptr<client::DataServiceClient> client_;
  client::ClientStats final_stats_;
  int64_t job_id_ = 0;
  int64_t job_client_id_ = 0;
  int64_t iteration_ = 0;
  std::string dataset_id_;
  std::string client_host_;
};

}  // namespace
}  // namespace sluice::python

PYBIND11_MODULE(_sluice, m) {
  using sluice::python::PyClient;
  m.doc() = "Sluice data-service client (C++ core). Use the `sluice` package's Dataset instead.";
  // NumPy, and pybind11's table of NumPy's C API, are loaded now, while the interpreter's import
  // lock runs this initialisation once. pybind11 2.10 loads them on first use inside a C++
  // function-local static: the first element conversion held that static's initialisation guard
  // while importing NumPy, and the import releases the GIL, so a second thread converting an
  // element (holding the GIL) waited on the guard while the first waited for the GIL — every
  // thread froze (four threads reading four datasets in a fresh interpreter: 3 of 3 runs).
  py::module_::import("numpy");
  (void)py::dtype("u1");  // runs pybind11's npy_api::get() lookup
  static py::exception<std::runtime_error> error(m, "DataServiceError", PyExc_RuntimeError);
  sluice::python::g_data_service_error = error.ptr();

  m.def(
      "parse_pipeline",
      [](const std::string& text, const std::string& filename) {
        auto def = sluice::python::ParseSpec(text, filename);
        return py::make_tuple(sluice::pipeline::ToYaml(def), sluice::pipeline::Fingerprint(def));
      },
      py::arg("text"), py::arg("filename") = "<string>",
      "Parses a pipeline spec with the C++ parser. Returns (canonical_yaml, fingerprint); raises ValueError.");
  m.def(
      "parse_pipeline_file",
      [](const std::string& path) {
        auto def = sluice::pipeline::ParsePipelineSpecFile(path);
        if (!def.ok()) throw py::value_error(std::string(def.status().message()));
        return py::make_tuple(sluice::pipeline::ToYaml(*def), sluice::pipeline::Fingerprint(*def));
      },
      py::arg("path"));

  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, std::optional<std::string>, const std::string&, std::optional<std::string>,
                    const std::string&, const std::string&, const std::string&, int, int, std::optional<bool>, int64_t,
                    const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::string&, const std::string&, const std::string&, std::optional<int>, int64_t, double,
                    double, std::optional<double>, int64_t>(),
           py::arg("address"), py::arg("spec_text") = py::none(), py::arg("spec_filename") = "<string>",
           py::arg("spec_path") = py::none(), py::arg("dataset_id") = "", py::arg("job_name") = "",
           py::arg("sharding") = "off", py::arg("num_consumers") = 0, py::arg("consumer_index") = -1,
           py::arg("cross_job_sharing") = py::none(), py::arg("num_epochs") = 1, py::arg("compression") = "auto",
           py::arg("target_workers") = "auto", py::arg("client_host") = "", py::arg("tls_ca") = "",
           py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("tls_server_name") = "",
           py::arg("max_outstanding_requests") = py::none(), py::arg("max_buffered_bytes") = int64_t{256} << 20,
           py::arg("heartbeat_interval_s") = 0.5, py::arg("create_timeout_s") = 60.0,
           py::arg("dispatcher_timeout_s") = 120.0, py::arg("iteration") = 0)
      .def("next", &PyClient::Next, "The next element (dict of NumPy arrays), or None at the end.")
      .def("begin_step", &PyClient::BeginStep)
      .def("end_step", &PyClient::EndStep)
      .def("stats", &PyClient::Stats)
      .def("close", &PyClient::Close)
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly("job_id", &PyClient::job_id)
      .def_property_readonly("job_client_id", &PyClient::job_client_id)
      .def_property_readonly("iteration", &PyClient::iteration)
      .def_property_readonly("dataset_id", &PyClient::dataset_id)
      .def_property_readonly("client_host", &PyClient::client_host);
}
