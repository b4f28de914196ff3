// The worker over real gRPC, in process: a WorkerServer + WorkerImpl talking to an in-test fake
// Dispatcher service, read through a raw Worker stub. Covers streaming, dynamic sharding through
// GetSplits RPCs, compression, coordinated reads, malformed and hostile requests, cancellation,
// mutual TLS, and the graceful shutdown sequence.
#include "dataplane/worker/grpc_worker.h"

#include <catch2/catch.hpp>

#include <grpcpp/generic/generic_stub.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "dataplane/pipeline/element_codec.h"
#include "dataplane/rpc/shm_ring.h"
#include "dataplane/worker/worker_test_util.h"
#include "testing/test_util.h"

namespace sluice::worker {
namespace {

using testing::FakeDispatcher;
using testing::FakeDispatcherServer;
using testing::MakeTask;
using testing::WaitUntil;

struct TlsSetup {
  rpc::TlsOptions server;   // the worker's server (and its client side towards the dispatcher)
  rpc::TlsOptions client;   // the test's element client
  std::shared_ptr<grpc::ServerCredentials> dispatcher;
};

// A worker serving on 127.0.0.1:<port>, registered with a fake dispatcher.
class WorkerUnderTest {
 public:
  explicit WorkerUnderTest(const TlsSetup* tls = nullptr, ShmConfig shm = ShmConfig{"", 0}) {
    dispatcher_server_ = std::make_unique<FakeDispatcherServer>(&fake, tls ? tls->dispatcher : nullptr);
    WorkerServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.shm = shm;
    if (tls) options.tls = tls->server;
    auto server = WorkerServer::Start(options);
    REQUIRE(server.ok());
    server_ = *std::move(server);
    address = absl::StrCat("127.0.0.1:", server_->port());
    auto channel = rpc::MakeChannel(dispatcher_server_->address(), tls ? tls->server : rpc::TlsOptions());
    REQUIRE(channel.ok());
    dispatcher_client_ = std::make_unique<GrpcDispatcherClient>(*channel);
    WorkerConfig config;
    config.worker_address = address;
    config.worker_host = "127.0.0.1";
    config.heartbeat_interval = absl::Milliseconds(20);
    config.unknown_task_wait = absl::Milliseconds(50);
    config.runner.buffer_elements = 32;
    config.runner.splits.initial_backoff = absl::Milliseconds(1);
    worker = std::make_unique<WorkerImpl>(config, dispatcher_client_.get());
    server_->service().SetWorker(worker.get());
    worker->Start();
    REQUIRE(WaitUntil([&] { return worker->registered(); }));
    auto client_channel = rpc::MakeChannel(address, tls ? tls->client : rpc::TlsOptions());
    REQUIRE(client_channel.ok());
    channel_ = *client_channel;
    stub = service::Worker::NewStub(channel_);
  }
  ~WorkerUnderTest() {
    server_->Shutdown(absl::Now() + absl::Seconds(1));
    worker->Stop();
  }

  // A dispatcher restart: down, then up again on the same port (state kept, as with its journal).
  void StopDispatcher() { dispatcher_server_->Shutdown(); }
  void StartDispatcher() {
    const int port = dispatcher_server_->port();
    dispatcher_server_.reset();
    dispatcher_server_ = std::make_unique<FakeDispatcherServer>(&fake, nullptr, port);
  }

  void Assign(const service::TaskDef& task) {
    fake.AssignTask(address, task);
    REQUIRE(WaitUntil([&] { return worker->FindTask(task.task_id(), nullptr).ok(); }));
  }

  FakeDispatcher fake;
  std::string address;
  std::unique_ptr<WorkerImpl> worker;
  std::unique_ptr<service::Worker::Stub> stub;
  WorkerServer& server() { return *server_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }

 private:
  std::unique_ptr<FakeDispatcherServer> dispatcher_server_;
  std::unique_ptr<GrpcDispatcherClient> dispatcher_client_;
  std::unique_ptr<WorkerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

struct StreamResult {
  std::vector<service::GetElementsResponse> responses;
  std::vector<int64_t> values;
  grpc::Status status;
};

StreamResult ReadStream(service::Worker::Stub& stub, const service::GetElementsRequest& request,
                        const std::string& field = "value") {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));  // hang guard
  context.set_wait_for_ready(true);  // the first call also sets up the connection (a TLS handshake)
  auto reader = stub.GetElements(&context, request);
  StreamResult out;
  service::GetElementsResponse response;
  while (reader->Read(&response)) {
    for (const auto& e : response.elements()) out.values.push_back(testing::DecodeInt(e, field));
    out.responses.push_back(response);
  }
  out.status = reader->Finish();
  if (!out.status.ok()) UNSCOPED_INFO("stream status " << out.status.error_code() << ": " << out.status.error_message());
  return out;
}

service::GetElementsRequest Request(int64_t task_id) {
  service::GetElementsRequest r;
  r.set_task_id(task_id);
  r.set_consumer_index(-1);
  return r;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

TEST_CASE("worker_grpc streams a task's elements to a raw stub, ending with end_of_sequence") {
  WorkerUnderTest w;
  w.Assign(MakeTask(1, "source: {range: {stop: 5000, split_size: 500}}\n"));
  StreamResult r = ReadStream(*w.stub, Request(1));
  REQUIRE(r.status.ok());
  CHECK(r.values == Iota(5000));
  REQUIRE_FALSE(r.responses.empty());
  CHECK(r.responses.back().end_of_sequence());
  for (size_t i = 0; i + 1 < r.responses.size(); ++i) CHECK_FALSE(r.responses[i].end_of_sequence());
  CHECK(w.server().service().streams_started() == 1);
}

TEST_CASE("worker_grpc dynamic sharding over GetSplits RPCs: two streams of two tasks cover the data once") {
  WorkerUnderTest w;
  const std::string spec = "source: {range: {stop: 2000, split_size: 20}}\n";
  w.fake.SetSplits(testing::SplitsOf(spec));
  w.Assign(MakeTask(1, spec, service::SHARDING_DYNAMIC));
  w.Assign(MakeTask(2, spec, service::SHARDING_DYNAMIC));
  StreamResult a;
  std::thread reader([&] { a = ReadStream(*w.stub, Request(1)); });
  StreamResult b = ReadStream(*w.stub, Request(2));
  reader.join();
  REQUIRE(a.status.ok());
  REQUIRE(b.status.ok());
  std::vector<int64_t> all = a.values;
  all.insert(all.end(), b.values.begin(), b.values.end());
  std::sort(all.begin(), all.end());
  CHECK(all == Iota(2000));
  CHECK(w.fake.calls_with_splits() <= 100 / 6 + 1 + 2);  // batched: >= 6 splits per call but the last per task
}

TEST_CASE("worker_grpc survives a dispatcher restart: heartbeats and GetSplits retry, no element lost or repeated") {
  WorkerUnderTest w;
  const std::string spec = "source: {range: {stop: 2000, split_size: 5}}\n";
  w.fake.SetSplits(testing::SplitsOf(spec));
  w.Assign(MakeTask(1, spec, service::SHARDING_DYNAMIC));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  context.set_wait_for_ready(true);
  service::GetElementsRequest request = Request(1);
  request.set_max_elements(10);
  auto reader = w.stub->GetElements(&context, request);
  std::vector<int64_t> values;
  service::GetElementsResponse response;
  while (values.size() < 100 && reader->Read(&response)) {
    for (const auto& e : response.elements()) values.push_back(testing::DecodeInt(e));
  }
  w.StopDispatcher();
  const size_t delivered = w.fake.heartbeats().size();
  REQUIRE(WaitUntil([&] { return w.worker->heartbeats_sent() >= static_cast<int64_t>(delivered) + 3; }));
  w.StartDispatcher();
  while (reader->Read(&response)) {
    for (const auto& e : response.elements()) values.push_back(testing::DecodeInt(e));
  }
  grpc::Status finished = reader->Finish();
  INFO(finished.error_message());
  REQUIRE(finished.ok());
  CHECK(values == Iota(2000));  // one task reads every split once, in order
  CHECK(WaitUntil([&] { return w.fake.heartbeats().size() > delivered; }));  // registered again
}

TEST_CASE("worker_grpc compression: each codec round-trips, AUTO picks per element") {
  WorkerUnderTest w;
  // Twelve compressible 32 KiB files; `label` numbers them in path order.
  sluice::testing::TempDir dir;
  for (int i = 0; i < 12; ++i) {
    sluice::testing::WriteFile(absl::StrCat(dir.path().string(), "/d", i < 10 ? "0" : "", i, "/x.bin"),
                               std::string(32768, static_cast<char>('a' + i)));
  }
  const std::string spec =
      absl::StrCat("source: {files: {files: '", dir.path().string(), "/*/x.bin', label_from_dir: true}}\n");
  for (auto [compression, task_id] : std::vector<std::pair<service::Compression, int64_t>>{
           {service::COMPRESSION_NONE, 1}, {service::COMPRESSION_LZ4, 2}, {service::COMPRESSION_ZSTD, 3}, {service::COMPRESSION_AUTO, 4}}) {
    w.Assign(MakeTask(task_id, spec));
    service::GetElementsRequest request = Request(task_id);
    request.set_compression(compression);
    StreamResult r = ReadStream(*w.stub, request, "label");
    REQUIRE(r.status.ok());
    CHECK(r.values == Iota(12));
    const auto expected = compression == service::COMPRESSION_AUTO ? service::COMPRESSION_LZ4 : compression;
    for (const auto& response : r.responses) {
      for (const auto& e : response.elements()) {
        CHECK(e.compression() == expected);
        CHECK(e.uncompressed_size() > 32768);
        if (e.compression() != service::COMPRESSION_NONE) CHECK(e.data().size() < e.uncompressed_size() / 10);
      }
    }
  }
  // The job's own setting applies when the request says AUTO.
  service::TaskDef zstd = MakeTask(5, spec);
  zstd.set_compression(service::COMPRESSION_ZSTD);
  w.Assign(zstd);
  StreamResult r = ReadStream(*w.stub, Request(5), "label");
  REQUIRE(r.status.ok());
  for (const auto& response : r.responses) {
    for (const auto& e : response.elements()) CHECK(e.compression() == service::COMPRESSION_ZSTD);
  }
}

TEST_CASE("worker_grpc coordinated reads through GetElement") {
  WorkerUnderTest w;
  service::TaskDef task = MakeTask(1, "source: {range: {stop: 100}}\n");
  task.set_num_consumers(2);
  w.Assign(task);
  for (int64_t round = 0; round < 3; ++round) {
    for (int64_t consumer : {1, 0}) {
      service::GetElementsRequest request;
      request.set_task_id(1);
      request.set_round(round);
      request.set_consumer_index(consumer);
      service::GetElementsResponse response;
      grpc::ClientContext context;
      context.set_wait_for_ready(true);
      grpc::Status status = w.stub->GetElement(&context, request, &response);
      REQUIRE(status.ok());
      REQUIRE(response.elements_size() == 1);
      CHECK(response.elements(0).round() == round);
      CHECK(testing::DecodeInt(response.elements(0)) == 2 * round + consumer);
    }
  }
  // A request that has to wait (round 4 while consumer 1 has not taken round 3) is served once the
  // round it waits for completes.
  auto get = [&](int64_t round, int64_t consumer) {
    service::GetElementsRequest request;
    request.set_task_id(1);
    request.set_round(round);
    request.set_consumer_index(consumer);
    service::GetElementsResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::Status status = w.stub->GetElement(&context, request, &response);
    REQUIRE(status.ok());
    REQUIRE(response.elements_size() == 1);
    return testing::DecodeInt(response.elements(0));
  };
  CHECK(get(3, 0) == 6);
  int64_t waited = -1;
  std::thread ahead([&] { waited = get(4, 0); });
  CHECK(get(3, 1) == 7);
  ahead.join();
  CHECK(waited == 8);
}

TEST_CASE("worker_grpc rejects malformed and hostile requests with clear errors, and stays healthy") {
  WorkerUnderTest w;
  w.Assign(MakeTask(1, "source: {range: {stop: 10}}\n"));
  service::TaskDef coordinated = MakeTask(2, "source: {range: {stop: 10}}\n");
  coordinated.set_num_consumers(2);
  w.Assign(coordinated);

  StreamResult unknown = ReadStream(*w.stub, Request(999));
  CHECK(unknown.status.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK_THAT(unknown.status.error_message(), Catch::Contains("task_id 999"));

  service::GetElementsRequest negative = Request(1);
  negative.set_max_elements(-1);
  StreamResult bad_max = ReadStream(*w.stub, negative);
  CHECK(bad_max.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(bad_max.status.error_message(), Catch::Contains("max_elements"));

  service::GetElementsRequest codec = Request(1);
  codec.set_compression(static_cast<service::Compression>(1234));
  CHECK(ReadStream(*w.stub, codec).status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);

  service::GetElementsRequest element;
  element.set_task_id(2);
  element.set_consumer_index(7);
  service::GetElementsResponse response;
  grpc::ClientContext c1;
  grpc::Status consumer = w.stub->GetElement(&c1, element, &response);
  CHECK(consumer.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(consumer.error_message(), Catch::Contains("consumer_index 7"));
  element.set_consumer_index(0);
  element.set_round(std::numeric_limits<int64_t>::min());
  grpc::ClientContext c2;
  CHECK(w.stub->GetElement(&c2, element, &response).error_code() == grpc::StatusCode::INVALID_ARGUMENT);

  // Bytes that are not a GetElementsRequest at all.
  grpc::GenericStub generic(w.channel());
  const std::string garbage = "\xff\xff\xff\xff\x0f\x08\x96";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request_bytes(&slice, 1);
  grpc::ByteBuffer response_bytes;
  grpc::ClientContext c3;
  c3.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Status garbage_status;
  absl::Notification done;
  generic.UnaryCall(&c3, "/sluice.service.Worker/GetElement", grpc::StubOptions(), &request_bytes, &response_bytes,
                    [&](grpc::Status s) {
                      garbage_status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  CHECK_FALSE(garbage_status.ok());

  // Still serving.
  StreamResult ok = ReadStream(*w.stub, Request(1));
  REQUIRE(ok.status.ok());
  CHECK(ok.values == Iota(10));
}

TEST_CASE("worker_grpc: a client cancelling mid-stream frees the stream's thread") {
  WorkerUnderTest w;
  service::TaskDef task = MakeTask(1, "source: {range: {stop: 100}}\n");
  task.set_num_epochs(-1);
  w.Assign(task);
  {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    auto reader = w.stub->GetElements(&context, Request(1));
    service::GetElementsResponse response;
    REQUIRE(reader->Read(&response));
    context.TryCancel();
    while (reader->Read(&response)) {
    }
    CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
  }
  CHECK(w.server().service().threads().WaitForIdle(absl::Now() + absl::Seconds(20)));
}

TEST_CASE("worker_grpc same-host shared memory: announced, attached, large payloads through the ring, ring gone") {
  sluice::testing::TempDir shm_dir;
  WorkerUnderTest w(nullptr, ShmConfig{shm_dir.path().string(), 4 << 20});
  // 200 elements of 160 KB: the index, padded with zeros to 20,000 int64 values.
  const std::string padded = "steps:\n  - map: {ops: [{reshape: {field: value, shape: [1]}}, {pad: {field: value, "
                             "length: 20000}}]}\n";
  w.Assign(MakeTask(1, "source: {range: {stop: 200}}\n" + padded));
  auto first_value = [](const service::ElementData& e) {
    REQUIRE(e.compression() == service::COMPRESSION_NONE);
    auto element = pipeline::DecodeElement(std::make_shared<const std::string>(e.data()));
    REQUIRE(element.ok());
    const pipeline::Tensor* t = element->Find("value");
    REQUIRE(t != nullptr);
    REQUIRE(t->num_elements() == 20000);
    return t->data<int64_t>()[0];
  };
  service::GetElementsRequest request = Request(1);
  request.set_shm_boot_id(rpc::ShmBootId());
  request.set_compression(service::COMPRESSION_NONE);
  // Opens a stream for `request`; its first response, `hello`, offers the ring and holds no element.
  auto open = [&](grpc::ClientContext& context, service::GetElementsResponse& hello) {
    context.set_wait_for_ready(true);
    auto reader = w.stub->GetElements(&context, request);
    REQUIRE(reader->Read(&hello));
    REQUIRE(hello.has_shm_ring());
    CHECK(hello.elements_size() == 0);
    return reader;
  };
  auto attach = [](const service::GetElementsResponse& hello) {
    auto ring = rpc::ShmRingReader::Attach(hello.shm_ring().path(), hello.shm_ring().file_bytes(), hello.shm_ring().nonce());
    REQUIRE(ring.ok());
    return *std::move(ring);
  };
  SECTION("a client that attaches gets payloads through the ring, and may release them") {
    grpc::ClientContext context;
    service::GetElementsResponse response;
    auto reader = open(context, response);
    auto ring = attach(response);
    int64_t via_shm = 0, next = 0;
    bool end = false;
    while (reader->Read(&response)) {
      for (service::ElementData e : response.elements()) {
        if (e.shm_size() > 0) {
          auto view = ring->View(e.shm_offset(), e.shm_size());
          REQUIRE(view.ok());
          e.set_data(std::string(*view));
          ring->Release(e.shm_offset() + e.shm_size());
          ++via_shm;
        }
        CHECK(first_value(e) == next);
        ++next;
      }
      end = end || response.end_of_sequence();
    }
    CHECK(reader->Finish().ok());
    CHECK(end);
    CHECK(next == 200);
    // Elements can come as bytes before the worker sees the attach; after it, all through the ring
    // (this client releases at once, so the ring never fills).
    CHECK(via_shm > 0);
    INFO(via_shm << " of 200 through shared memory");
  }
  SECTION("a client holding its elements fills the ring: the rest come as bytes, and through it once released") {
    // As the client's ResponseParser holds views (ShmRingReader::Hold): the worker reuses no slot
    // still held. 400 elements of 160 KB; a 4 MiB ring holds ~25 of them.
    w.Assign(MakeTask(3, "source: {range: {stop: 400}}\n" + padded));
    request.set_task_id(3);
    grpc::ClientContext context;
    service::GetElementsResponse response;
    auto reader = open(context, response);
    auto ring = attach(response);
    std::vector<std::shared_ptr<const void>> held;
    int64_t next = 0, via_shm_held = 0, bytes_while_full = 0, via_shm_after = 0;
    while (reader->Read(&response)) {
      for (service::ElementData e : response.elements()) {
        if (e.shm_size() > 0) {
          auto view = ring->Hold(e.shm_offset(), e.shm_size());
          REQUIRE(view.ok());
          e.set_data(std::string(view->bytes));
          if (next < 200) {
            held.push_back(std::move(view->owner));  // kept: the ring fills
            ++via_shm_held;
          } else {
            ++via_shm_after;  // dropped at once
          }
        } else if (via_shm_held > 0 && next < 200) {
          ++bytes_while_full;
        }
        CHECK(first_value(e) == next);
        if (++next == 200) held.clear();  // the trainer lets go of everything it held
      }
    }
    CHECK(reader->Finish().ok());
    CHECK(next == 400);
    INFO(via_shm_held << " held in the ring, " << bytes_while_full << " as bytes while it was full, " << via_shm_after
                      << " through it after the release");
    CHECK(via_shm_held > 0);
    CHECK(static_cast<uint64_t>(via_shm_held) * 160000 <= ring->data_bytes());
    CHECK(bytes_while_full > 0);
    CHECK(via_shm_after > 0);
  }
  SECTION("a client that never attaches (another /dev/shm) gets bytes; the ring goes with the stream") {
    grpc::ClientContext context;
    service::GetElementsResponse response;
    auto reader = open(context, response);
    int64_t next = 0;
    while (reader->Read(&response)) {
      for (const service::ElementData& e : response.elements()) {
        CHECK(e.shm_size() == 0);
        CHECK(first_value(e) == next);
        ++next;
      }
    }
    CHECK(reader->Finish().ok());
    CHECK(next == 200);
  }
  SECTION("a client killed mid-stream: the worker removes the ring when the stream ends") {
    service::TaskDef forever = MakeTask(2, "source: {range: {stop: 100}}\n" + padded);
    forever.set_num_epochs(-1);
    w.Assign(forever);
    request.set_task_id(2);
    {
      grpc::ClientContext context;
      service::GetElementsResponse response;
      auto reader = open(context, response);
      CHECK(std::filesystem::exists(response.shm_ring().path()));
      context.TryCancel();
      while (reader->Read(&response)) {
      }
    }
    REQUIRE(w.server().service().threads().WaitForIdle(absl::Now() + absl::Seconds(20)));
  }
  REQUIRE(w.server().service().threads().WaitForIdle(absl::Now() + absl::Seconds(20)));
  CHECK(std::filesystem::is_empty(shm_dir.path()));
}

TEST_CASE("worker_grpc mutual TLS: the server and the dispatcher channel use certificates") {
  sluice::testing::TempDir dir;
  auto cert = testing::WriteSelfSignedCertificate(dir.path().string(), "sluice-test");
  TlsSetup tls;
  tls.server.cert_file = cert.cert_file;
  tls.server.key_file = cert.key_file;
  tls.server.ca_file = cert.cert_file;
  tls.server.require_client_cert = true;
  tls.client = tls.server;
  tls.client.require_client_cert = false;
  rpc::TlsOptions dispatcher_side = tls.server;
  auto dispatcher_credentials = rpc::MakeServerCredentials(dispatcher_side);
  REQUIRE(dispatcher_credentials.ok());
  tls.dispatcher = *dispatcher_credentials;
  WorkerUnderTest w(&tls);  // registration over mTLS
  w.Assign(MakeTask(1, "source: {range: {stop: 50}}\n"));
  StreamResult r = ReadStream(*w.stub, Request(1));
  REQUIRE(r.status.ok());
  CHECK(r.values == Iota(50));

  // Without a client certificate the handshake fails; in plaintext too.
  rpc::TlsOptions no_cert;
  no_cert.ca_file = cert.cert_file;
  for (const auto& options : {no_cert, rpc::TlsOptions()}) {
    auto channel = rpc::MakeChannel(w.address, options);
    REQUIRE(channel.ok());
    auto stub = service::Worker::NewStub(*channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto reader = stub->GetElements(&context, Request(1));
    service::GetElementsResponse response;
    CHECK_FALSE(reader->Read(&response));
    CHECK(reader->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  }
}

TEST_CASE("worker_grpc graceful shutdown: buffered elements, then UNAVAILABLE, draining heartbeat, deregistered") {
  WorkerUnderTest w;
  w.Assign(MakeTask(1, "source: {range: {stop: 100000000}}\n"));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  context.set_wait_for_ready(true);
  service::GetElementsRequest request = Request(1);
  request.set_max_elements(1);
  auto reader = w.stub->GetElements(&context, request);
  service::GetElementsResponse response;
  REQUIRE(reader->Read(&response));
  std::vector<int64_t> values = {testing::DecodeInt(response.elements(0))};
  std::thread shutdown([&] { w.server().GracefulShutdown(*w.worker, absl::Milliseconds(1800)); });
  while (reader->Read(&response)) {
    CHECK_FALSE(response.end_of_sequence());
    for (const auto& e : response.elements()) values.push_back(testing::DecodeInt(e));
  }
  grpc::Status status = reader->Finish();
  shutdown.join();
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(values == Iota(static_cast<int64_t>(values.size())));  // in order, nothing skipped
  CHECK(w.fake.deregistered() == std::vector<std::string>{w.address});
  // No heartbeat after the deregistration (it would register the worker again).
  CHECK(w.fake.heartbeats_at_deregistration() == static_cast<int64_t>(w.fake.heartbeats().size()));
  bool said_draining = false;
  for (const auto& hb : w.fake.heartbeats()) said_draining = said_draining || hb.draining();
  CHECK(said_draining);
}

}  // namespace
}  // namespace sluice::worker
