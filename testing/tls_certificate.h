// Test certificates: a self-signed certificate for localhost / 127.0.0.1 that also serves as its
// own CA, written as PEM files. Used by the TLS tests of the dispatcher and of the data service end
// to end. Test-only (fails the current Catch2 test on OpenSSL errors).
#ifndef SLUICE_TESTING_TLS_CERTIFICATE_H_
#define SLUICE_TESTING_TLS_CERTIFICATE_H_

#include <string>

#include "testing/test_util.h"

namespace sluice::testing {

struct TestCertificate {
  std::string cert_file;  // PEM certificate (also the CA to trust it with)
  std::string key_file;   // PEM private key (P-256)
};

// Writes <dir>/<name>.crt and <dir>/<name>.key: CN=name, SAN DNS:localhost and IP:127.0.0.1,
// valid from an hour ago for a day. Usable as server certificate, client certificate and CA at once.
TestCertificate MakeSelfSignedCertificate(const std::string& dir, const std::string& name);
inline TestCertificate MakeSelfSignedCertificate(const TempDir& dir, const std::string& name) {
  return MakeSelfSignedCertificate(dir.path().string(), name);
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTING_TLS_CERTIFICATE_H_
