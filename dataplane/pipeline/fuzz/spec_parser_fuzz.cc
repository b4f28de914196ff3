// Fuzz target: the pipeline spec parser (YAML/JSON text -> canonical PipelineDef).
//
// Properties checked: parsing never crashes; an accepted spec, rendered back to YAML with ToYaml(),
// parses again to a def with the same fingerprint. Inputs mentioning plugins are ignored, so the
// fuzzer never makes the parser load a shared library named by random input. The round trip is
// only checked for valid UTF-8 input: the parser currently accepts invalid UTF-8 in strings, which
// protobuf and the YAML emitter then mangle (reported; see docs/pipeline-tfrecord.md).
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "dataplane/pipeline/fuzz/fuzz_check.h"
#include "dataplane/pipeline/spec_parser.h"

namespace {

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<uint8_t>(text[i]);
    size_t extra = 0;
    uint32_t code = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xe0) == 0xc0) {
      extra = 1;
      code = lead & 0x1f;
    } else if ((lead & 0xf0) == 0xe0) {
      extra = 2;
      code = lead & 0x0f;
    } else if ((lead & 0xf8) == 0xf0) {
      extra = 3;
      code = lead & 0x07;
    } else {
      return false;
    }
    if (text.size() - i <= extra) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    static constexpr uint32_t kMinimum[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMinimum[extra] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  if (text.find("plugin") != absl::string_view::npos) return 0;
  auto def = sluice::pipeline::ParsePipelineSpec(text, "fuzz.yaml");
  if (!def.ok()) {
    FUZZ_CHECK(!def.status().message().empty(), "error without a message");
    return 0;
  }
  if (!IsValidUtf8(text)) return 0;
  const std::string fingerprint = sluice::pipeline::Fingerprint(*def);
  const std::string yaml = sluice::pipeline::ToYaml(*def);
  auto again = sluice::pipeline::ParsePipelineSpec(yaml, "roundtrip.yaml");
  FUZZ_CHECK(again.ok(), "ToYaml output does not parse: %s\n--- yaml ---\n%s",
             std::string(again.status().message()).c_str(), yaml.c_str());
  FUZZ_CHECK(sluice::pipeline::Fingerprint(*again) == fingerprint,
             "fingerprint changed through ToYaml:\n%s", yaml.c_str());
  return 0;
}
