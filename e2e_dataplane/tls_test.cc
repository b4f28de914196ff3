// Mutual TLS end to end: a dispatcher and two workers started with certificate flags (the workers
// also present theirs to the dispatcher), a C++ client with a certificate reading every element,
// clients without the right credentials refused, and `sluice dispatcher-state` over TLS.
#include <catch2/catch.hpp>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "dataplane/rpc/credentials.h"
#include "e2e_dataplane/e2e_test_util.h"
#include "testing/test_util.h"
#include "testing/tls_certificate.h"
#include "tools/sluice/dataservice_commands.h"

namespace sluice::e2e {
namespace {

TEST_CASE("mutual TLS on every endpoint: the data flows with certificates and nowhere without") {
  sluice::testing::TempDir dir;
  // One CA-signed identity per party would be closer to production; a self-signed certificate
  // that is its own CA, shared by the servers, and a second one for the client, exercise the same
  // checks: each side verifies the other against the CA it was given.
  const auto servers = sluice::testing::MakeSelfSignedCertificate(dir, "servers");
  const auto trainer = sluice::testing::MakeSelfSignedCertificate(dir, "trainer");
  // Servers trust both identities (a CA bundle), the client trusts the servers'.
  const std::string bundle = dir.File("bundle.pem");
  sluice::testing::WriteFile(bundle, sluice::testing::ReadFile(servers.cert_file) + sluice::testing::ReadFile(trainer.cert_file));
  const std::vector<std::string> tls_flags = {"--tls_cert=" + servers.cert_file, "--tls_key=" + servers.key_file,
                                              "--tls_ca=" + bundle, "--tls_require_client_cert"};
  auto options = TestServiceOptions();
  options.dispatcher_flags = tls_flags;
  options.worker_flags = tls_flags;
  options.client_tls.ca_file = servers.cert_file;
  options.client_tls.cert_file = servers.cert_file;
  options.client_tls.key_file = servers.key_file;
  auto service = StartService(2, options);  // waits for both workers through GetState over mTLS

  constexpr int64_t kElements = 2000;
  auto o = ClientOptions(service->dispatcher_address(), RangePipeline(kElements, 100), service::SHARDING_DYNAMIC);
  o.tls.ca_file = servers.cert_file;
  o.tls.cert_file = trainer.cert_file;
  o.tls.key_file = trainer.key_file;
  auto client = MakeClient(o);
  const std::vector<int64_t> values = ReadAll(*client);
  INFO(service->Logs());
  CHECK(CountProblems(Counts(values), kElements, 1) == "");  // every element exactly once, over TLS

  // A client with these TLS options cannot even start: the handshake fails until create_timeout.
  auto refused = [&](const rpc::TlsOptions& tls) {
    auto o2 = ClientOptions(service->dispatcher_address(), RangePipeline(10, 10), service::SHARDING_DYNAMIC);
    o2.create_timeout = absl::Seconds(2);
    o2.tls = tls;
    return !client::DataServiceClient::Create(o2).ok();
  };
  SECTION("a plaintext client is refused") { CHECK(refused(rpc::TlsOptions{})); }
  SECTION("a TLS client without a certificate is refused (mutual TLS)") {
    rpc::TlsOptions no_cert;
    no_cert.ca_file = servers.cert_file;
    CHECK(refused(no_cert));
  }
  SECTION("a client that does not trust the servers' CA is refused") {
    rpc::TlsOptions wrong_ca;
    wrong_ca.ca_file = trainer.cert_file;
    wrong_ca.cert_file = trainer.cert_file;
    wrong_ca.key_file = trainer.key_file;
    CHECK(refused(wrong_ca));
  }
  SECTION("sluice dispatcher-state over mutual TLS, and refused without it") {
    std::ostringstream out, err;
    rpc::TlsOptions tls;
    tls.ca_file = servers.cert_file;
    tls.cert_file = trainer.cert_file;
    tls.key_file = trainer.key_file;
    CHECK(cli::RunDispatcherState(service->dispatcher_address(), /*json=*/false, tls, out, err) == 0);
    CHECK(out.str().find("workers: 2") != std::string::npos);
    std::ostringstream out2, err2;
    CHECK(cli::RunDispatcherState(service->dispatcher_address(), /*json=*/false, rpc::TlsOptions{}, out2, err2) == 1);
    CHECK(err2.str().find("GetState from") != std::string::npos);
  }
}

}  // namespace
}  // namespace sluice::e2e
