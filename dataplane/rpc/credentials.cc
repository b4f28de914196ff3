#include "dataplane/rpc/credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace sluice::rpc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is not a PEM file"));
  }
  return s;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError("TLS on a server needs both --tls_cert and --tls_key");
  }
  auto cert = ReadPem(tls.cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(tls.key_file, "--tls_key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(
      tls.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!tls.ca_file.empty()) {
    auto ca = ReadPem(tls.ca_file, "--tls_ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  } else if (tls.require_client_cert) {
    return absl::InvalidArgumentError("mutual TLS (--tls_require_client_cert) needs --tls_ca to verify clients");
  }
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    auto ca = ReadPem(tls.ca_file, "--tls_ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  if (!tls.cert_file.empty()) {
    if (tls.key_file.empty()) return absl::InvalidArgumentError("a client certificate (--tls_cert) needs --tls_key");
    auto cert = ReadPem(tls.cert_file, "--tls_cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(tls.key_file, "--tls_key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

grpc::ChannelArguments MakeChannelArguments(int max_message_bytes, const std::string& server_name_override) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Reconnect quickly after a dispatcher or worker restart: the first retry after 100 ms. gRPC
  // also takes GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as the least time a connection attempt may take
  // (its minimum connect timeout), so that one stays at kMinConnectTimeoutMs: a TCP + TLS handshake
  // cut off after 100 ms on a loaded machine fails over and over ("tcp handshaker shutdown").
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kMinConnectTimeoutMs);
  if (!server_name_override.empty()) args.SetSslTargetNameOverride(server_name_override);
  return args;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address, const TlsOptions& tls,
                                                           int max_message_bytes) {
  auto creds = MakeChannelCredentials(tls);
  if (!creds.ok()) return creds.status();
  return grpc::CreateCustomChannel(address, *creds, MakeChannelArguments(max_message_bytes, tls.server_name_override));
}

absl::Status ToAbsl(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace sluice::rpc
