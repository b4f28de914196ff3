// The worker's side of the same-host shared-memory transport (docs/dataservice.md, "Same-host
// shared memory"; the ring itself is dataplane/rpc/shm_ring.h): for one GetElements stream whose
// client offered it, a ring announced in the stream's first message, and the payloads of large
// elements moved into it once the client attached. Elements whose payload does not fit (the client
// has not consumed enough: a slow or stuck client) go as bytes, as they always did.
//
// Threading: one stream's sender thread uses its ShmStream.
#ifndef SLUICE_DATAPLANE_WORKER_SHM_STREAM_H_
#define SLUICE_DATAPLANE_WORKER_SHM_STREAM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "dataplane/rpc/shm_ring.h"
#include "dataplane/worker/response_encoder.h"
#include "dataservice.pb.h"

namespace sluice::worker {

struct ShmConfig {
  std::string dir = "/dev/shm";            // --shm_dir; empty: off
  uint64_t ring_bytes = uint64_t{32} << 20;  // --shm_ring_bytes per stream; 0: off
  bool enabled() const { return !dir.empty() && ring_bytes > 0; }
};

// At start-up: removes the rings of dead workers in the directory and checks that a ring can be
// created there. Not OK: the worker serves every stream over the socket (the caller logs it once).
absl::Status PrepareShmDir(const ShmConfig& config);

class ShmStream {
 public:
  // A ring for this stream, or null: shm off, the request does not offer it, the client is on
  // another host (boot id), or the ring cannot be created (logged once per process at warning,
  // later at debug).
  static std::unique_ptr<ShmStream> Open(const ShmConfig& config, const service::GetElementsRequest& request);
  explicit ShmStream(std::unique_ptr<rpc::ShmRingWriter> ring) : ring_(std::move(ring)) {}

  // The stream's first message: GetElementsResponse{shm_ring}, as a response whose one entry is
  // the shm_ring field, framed (the response encoder sends framed bytes as they are; the client's
  // parser yields no element for it).
  ElementsResponse Hello() const;
  // Once the client attached, copies the payload of each element of `response` larger than
  // rpc::kShmMinElementBytes into the ring and replaces the element by its (position, size)
  // entry; elements that do not fit stay as they are.
  void Divert(ElementsResponse& response);

  int64_t diverted() const { return diverted_; }
  int64_t fallbacks() const { return fallbacks_; }  // large elements sent as bytes: the ring was full
  rpc::ShmRingWriter& ring() { return *ring_; }

 private:
  std::unique_ptr<rpc::ShmRingWriter> ring_;
  bool reserve_logged_ = false;
  int64_t diverted_ = 0;
  int64_t fallbacks_ = 0;
};

// The `elements` entry of a GetElementsResponse for an element whose bytes are in the ring.
std::string FrameShmEntry(const EncodedElement& element, uint64_t position);

}  // namespace sluice::worker

#endif  // SLUICE_DATAPLANE_WORKER_SHM_STREAM_H_
