#include "testing/tls_certificate.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <utility>
#include <vector>

namespace sluice::testing {
namespace {

template <typename Write>
std::string ToPem(Write write) {
  BIO* bio = BIO_new(BIO_s_mem());
  write(bio);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(size));
  BIO_free(bio);
  return out;
}

}  // namespace

TestCertificate MakeSelfSignedCertificate(const std::string& dir, const std::string& name) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  REQUIRE(key != nullptr);
  X509* cert = X509_new();
  REQUIRE(X509_set_version(cert, 2) == 1);
  static std::atomic<long> serial{100};  // distinct serials: a CA bundle may hold several of these
  REQUIRE(ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++) == 1);
  REQUIRE(X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != nullptr);
  REQUIRE(X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600) != nullptr);
  REQUIRE(X509_set_pubkey(cert, key) == 1);
  X509_NAME* subject = X509_get_subject_name(cert);
  REQUIRE(X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()),
                                     -1, -1, 0) == 1);
  REQUIRE(X509_set_issuer_name(cert, subject) == 1);
  for (auto [nid, value] : std::vector<std::pair<int, const char*>>{
           {NID_basic_constraints, "critical,CA:TRUE"},
           {NID_key_usage, "critical,digitalSignature,keyCertSign"},
           {NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1"}}) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    REQUIRE(ext != nullptr);
    REQUIRE(X509_add_ext(cert, ext, -1) == 1);
    X509_EXTENSION_free(ext);
  }
  REQUIRE(X509_sign(cert, key, EVP_sha256()) > 0);
  TestCertificate out;
  out.cert_file = dir + "/" + name + ".crt";
  out.key_file = dir + "/" + name + ".key";
  WriteFile(out.cert_file, ToPem([&](BIO* b) { PEM_write_bio_X509(b, cert); }));
  WriteFile(out.key_file, ToPem([&](BIO* b) { PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); }));
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

}  // namespace sluice::testing
