// gRPC security and channel settings shared by the dispatcher, workers and clients: optional TLS
// and mutual TLS from certificate files, and message size limits. Stateless; thread-safe.
#ifndef SLUICE_DATAPLANE_RPC_CREDENTIALS_H_
#define SLUICE_DATAPLANE_RPC_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace sluice::rpc {

// Empty cert_file/key_file/ca_file means plaintext.
struct TlsOptions {
  std::string cert_file;            // this endpoint's certificate (PEM)
  std::string key_file;             // its private key (PEM)
  std::string ca_file;              // CA to verify the peer with (PEM)
  bool require_client_cert = false; // servers: mutual TLS
  std::string server_name_override; // clients: expected server name when it differs from the address
  bool enabled() const { return !cert_file.empty() || !ca_file.empty(); }
};

inline constexpr int kDefaultMaxMessageBytes = 256 << 20;
// The least time a connection attempt is given (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, which gRPC also
// uses as its minimum connect timeout). A refused connection still fails at once and is retried
// after the (shorter) initial backoff.
inline constexpr int kMinConnectTimeoutMs = 2000;

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsOptions& tls);
// Channel arguments with the message size limits and keepalive suited to long element streams.
grpc::ChannelArguments MakeChannelArguments(int max_message_bytes = kDefaultMaxMessageBytes,
                                            const std::string& server_name_override = "");
// A channel to `address` ("host:port").
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address, const TlsOptions& tls,
                                                           int max_message_bytes = kDefaultMaxMessageBytes);

// Converts between grpc::Status and absl::Status, keeping the code and message.
absl::Status ToAbsl(const grpc::Status& status);
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace sluice::rpc

#endif  // SLUICE_DATAPLANE_RPC_CREDENTIALS_H_
